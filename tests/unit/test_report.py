"""report: series from metrics.jsonl (held-out before/after joined into one line), PNGs."""

from __future__ import annotations

import json
from pathlib import Path

from agent_r1_async.run import report


def _write(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


ROWS = [
    {"update": 0, "time": 1.0, "eval/before/success": 0.36},
    {"update": 1, "time": 2.0, "reward/mean": 0.7, "env/success": 0.5, "staleness/mean": 0.0},
    {"update": 2, "time": 3.0, "reward/mean": 0.9, "env/success": 0.75, "staleness/mean": 1.0},
    {"update": 2, "time": 4.0, "eval/after/success": 0.52},
]


def test_series_joins_keys_in_update_order_and_skips_missing():
    xs, ys = report._series(ROWS, ("eval/before/success", "eval/after/success"))
    assert (xs, ys) == ([0.0, 2.0], [0.36, 0.52])
    assert report._series(ROWS, "reward/mean") == ([1.0, 2.0], [0.7, 0.9])
    assert report._series(ROWS, "no/such") == ([], [])


def test_write_report_reads_a_torn_last_line_and_writes_both_plots(tmp_path):
    run = tmp_path / "run"
    _write(run, ROWS)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"update": 3, "rew')  # a record being written
    assert len(report.read_metrics(run)) == 4
    paths = report.write_report(run)
    assert [p.name for p in paths] == ["reward.png", "staleness.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_periodic_eval_rows_are_plotted_at_their_versions(tmp_path):
    # eval.every_updates=2: v0's result is logged after update 1, v2's after update 3
    rows = [
        {"update": 1, "time": 1.0, "reward/mean": 0.1},
        {"update": 0, "time": 1.5, "eval/periodic/em": 0.05, "eval/periodic/version": 0},
        {"update": 2, "time": 2.0, "reward/mean": 0.2},
        {"update": 3, "time": 3.0, "reward/mean": 0.3},
        {"update": 2, "time": 3.5, "eval/periodic/em": 0.25, "eval/periodic/version": 2},
    ]
    assert report._series(rows, "eval/periodic/em") == ([0.0, 2.0], [0.05, 0.25])
    assert report.success_metric(rows) == "em"
    run = tmp_path / "run"
    _write(run, rows)
    assert report.write_report(run)[0].stat().st_size > 1000

"""`agent-r1-async report`: held-out evaluations are drawn as what they are."""

from __future__ import annotations

import json

import matplotlib.axes
import pytest

from agent_r1_async.run.output.report import write_report


def test_before_after_are_points_and_periodic_evaluations_a_curve(tmp_path, monkeypatch):
    rows = [{"update": 0, "time": 0.0, "eval/before/success": 0.2}]
    rows += [{"update": u, "time": float(u), "reward/mean": 0.1 * u, "env/success": 0.1 * u,
              "staleness/mean": 0.5, "staleness/max": 1.0} for u in (1, 2, 3, 4)]
    rows += [{"update": 2, "time": 2.5, "eval/periodic/success": 0.4},
             {"update": 4, "time": 4.5, "eval/periodic/success": 0.5},
             {"update": 4, "time": 5.0, "eval/after/success": 0.6}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    drawn: list[tuple[list[float], list[float], str, str]] = []
    original = matplotlib.axes.Axes.plot

    def record(self, xs, ys, fmt, **kw):
        drawn.append((list(xs), list(ys), fmt, kw.get("label", "")))
        return original(self, xs, ys, fmt, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    paths = write_report(tmp_path)
    assert [p.name for p in paths] == ["reward.png", "staleness.png"]
    by_label = {label: (xs, ys, fmt) for xs, ys, fmt, label in drawn}
    assert by_label["held-out success before RL"] == ([0.0], [0.2], "o")  # a point, no line
    assert by_label["held-out success after RL"] == ([4.0], [0.6], "o")
    assert by_label["held-out success (eval.every_updates subset)"] == ([2.0, 4.0], [0.4, 0.5], "o-")
    xs, ys, fmt = by_label["train reward (outcome + process)"]
    assert fmt == "-" and xs == [1.0, 2.0, 3.0, 4.0]
    assert ys[-1] == pytest.approx((0.1 + 0.2 + 0.3 + 0.4) / 4, rel=1e-12)  # mean of the 4 so far


def test_distributions_over_time_have_a_column_per_logged_update_only(tmp_path):
    from agent_r1_async.run.output.report import length_shares, staleness_shares

    rows = []
    for u, gen in ((1, {1: 2, 2: 2}), (2, {1: 3, 2: 5}), (5, {1: 7, 2: 5}), (6, {1: 1, 2: 1})):
        rows.append({"update": u, "time": float(u), "staleness/mean": 0.5, "staleness/max": 1,
                     "reward/mean": 0.0,
                     "staleness/hist": {"bins": [0, 1], "counts": [3 * u, u]},
                     **{f"episodes/generated/le_{b}": n for b, n in gen.items()}})
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    stale = staleness_shares(rows)
    assert sorted(stale) == [1, 2, 5, 6] and stale[2] == {0: 0.75, 1: 0.25}
    lengths = length_shares(rows, "generated")
    # From 0 at the run's start; update 5 counts what came since update 2; update 6's counts
    # went down (a buffer restored from an older snapshot): no column.
    assert lengths == {1: {1: 0.5, 2: 0.5}, 2: {1: 0.25, 2: 0.75}, 5: {1: 1.0, 2: 0.0}}
    assert length_shares(rows, "trained") == {}
    names = [p.name for p in write_report(tmp_path)]
    assert names == ["reward.png", "staleness.png", "staleness_dist.png", "episode_lengths.png"]

"""bench/bench_agent_r1_table.py: a run's summary, the table and the spread verdict, by hand."""

from __future__ import annotations

import json
import time

import pytest

from tests.unit.bench.test_smoke import load


def test_imports_and_documents_its_command():
    mod = load("bench_agent_r1_table")
    assert callable(mod.main) and "-m bench.bench_agent_r1_table" in mod.__doc__


def test_summarize_run_curve_against_rl_wall_clock(tmp_path):
    mod = load("bench_agent_r1_table")
    rows = [  # the run's clock started 20 s after the launch command
        {"update": 1, "time": 40.0, "learner/loss": 0.5},
        {"update": 0, "time": 50.0, "eval/periodic/em": 0.125, "eval/periodic/version": 0},
        {"update": 2, "time": 100.0, "learner/loss": 0.4},
        {"update": 2, "time": 130.0, "eval/periodic/em": 0.25, "eval/periodic/version": 2},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before, after = {"em": 0.1, "f1": 0.2}, {"em": 0.3, "f1": 0.4}
    s = mod.summarize_run(tmp_path, before, after, 20.0)
    # v0 at 0 min; v2 produced at 100 + 20 = 120 s = 2 min; the final (full dev) point too
    assert s["curve"] == [(0.0, 0.125), (2.0, 0.25), (2.0, 0.3)]
    assert (s["before_em"], s["em"], s["f1"], s["updates"]) == (0.1, 0.3, 0.4, 2)
    assert s["rl_min"] == pytest.approx(2.0)
    # without eval.every_updates the curve starts at the warm start's own result
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps(r) + "\n" for r in rows if "eval/periodic/em" not in r))
    assert mod.summarize_run(tmp_path, before, after, 20.0)["curve"] == [(0.0, 0.1), (2.0, 0.3)]


def test_clock_offset_reads_the_run_directory_stamp(tmp_path):
    mod = load("bench_agent_r1_table")
    run = tmp_path / "mh-grpo-s0-20261124-044434"  # 2026-11-24 04:44:34, local time
    t_start = time.mktime((2026, 11, 24, 4, 44, 27, 0, 0, -1))  # 7 s before the directory
    assert mod.clock_offset_s(run, t_start) == 7.0
    # a second run in the same second gets NAME-STAMP-2 (run/output/run_dir.py): same stamp
    assert mod.clock_offset_s(tmp_path / "mh-grpo-s0-20261124-044434-2", t_start) == 7.0
    with pytest.raises(ValueError, match="not a run directory name"):
        mod.clock_offset_s(tmp_path / "mh-grpo-s0", t_start)


def test_table_and_spread_verdict():
    mod = load("bench_agent_r1_table")
    a = [{"em": 0.5, "f1": 0.6, "updates": 10, "rl_min": 5.0},
         {"em": 0.7, "f1": 0.8, "updates": 12, "rl_min": 5.0}]
    b = [{"em": 0.1, "f1": 0.2}, {"em": 0.1, "f1": 0.2}]
    md = mod.table({"GRPO": a, "Naive RAG": b}, "t")
    # mean 0.6, sample std of (0.5, 0.7) = 0.1414
    assert "| GRPO | 0.600 ± 0.141 | 0.700 ± 0.141 | 2 | 11 | 5.0 |" in md
    assert "| Naive RAG | 0.100 ± 0.000 | 0.200 ± 0.000 | 2 | - | - |" in md
    # ΔEM 0.5 > std sum 0.141 -> exceeds; a 1-seed row has no spread to compare
    assert "exceeds the seed spread (std sum 0.141)" in mod.compare(a, b, "GRPO", "Naive RAG")
    assert "does not exceed" in mod.compare(a, [{"em": 0.55}, {"em": 0.75}], "x", "y")
    assert "no spread" in mod.compare(a[:1], b, "x", "y")


def test_paired_gain_over_the_warm_start():
    mod = load("bench_agent_r1_table")
    runs = [{"em": 0.30, "before_em": 0.20}, {"em": 0.10, "before_em": 0.15}]
    # gains +0.10 and -0.05: mean +0.025, std sqrt(2 * 0.075^2) = 0.106
    assert mod.paired_gain(runs, "GRPO") == ("GRPO minus the warm start at the same seed: "
                                             "ΔEM +0.025 ± 0.106 (per seed +0.100, -0.050)")
    assert mod.paired_gain(runs[:1], "PPO").endswith("ΔEM +0.100 (per seed +0.100)")


def test_two_arms_are_also_compared_seed_by_seed():
    """The ablation's step-vs-token arms at seeds 0-2 (EM rounded): unpaired the
    difference is inside the spread, paired every seed favours step credit."""
    mod = load("bench_agent_r1_table")
    step = [{"seed": s, "em": e} for s, e in ((0, 0.224), (1, 0.119), (2, 0.189))]
    token = [{"seed": s, "em": e} for s, e in ((0, 0.133), (1, 0.042), (2, 0.168))]
    # differences +0.091, +0.077, +0.021: mean +0.063; deviations +0.028, +0.014, -0.042,
    # squares sum 0.002744 / 2 = 0.001372 -> std 0.037
    assert mod.paired_difference(step, token) == (
        "; paired by seed ΔEM +0.063 ± 0.037 (per seed +0.091, +0.077, +0.021: 3 of 3 the "
        "same sign)")
    assert mod.compare(step, token, "step", "token").endswith("3 of 3 the same sign)")
    # only the seeds both arms ran are paired (-0.076, +0.100: mean +0.012, std 0.176 / √2 =
    # 0.124); a sign against the mean is not counted
    other = [{"seed": 0, "em": 0.30}, {"seed": 2, "em": 0.089}, {"seed": 7, "em": 0.9}]
    assert mod.paired_difference(step, other) == (
        "; paired by seed ΔEM +0.012 ± 0.124 (per seed -0.076, +0.100: 1 of 2 the same sign)")
    assert mod.paired_difference(step[:1], token) == ""  # one common seed: nothing to say

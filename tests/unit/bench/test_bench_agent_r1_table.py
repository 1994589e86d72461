"""bench/bench_agent_r1_table.py by hand: a run's summary, paired intervals, the table's rows,
recall and noise line, --summarize, and the bench's order of work with every run faked."""

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


# --- paired statistics, rows, recall, noise, --summarize ----------------------------------


def _seeds(ems, **extra):
    return [{"seed": s, "em": e, "f1": e, **extra} for s, e in enumerate(ems)]


def test_paired_interval_that_excludes_zero():
    mod = load("bench_agent_r1_table")
    grpo, rag = _seeds([0.30, 0.34, 0.38]), _seeds([0.20, 0.22, 0.27])
    # differences 0.10, 0.12, 0.11: mean 0.11, sd 0.01, t975(2) = 4.303,
    # half-width 4.303 * 0.01 / sqrt(3) = 0.02484 -> [0.0852, 0.1348]
    p = mod.paired(grpo, rag)
    assert p["seeds"] == [0, 1, 2]
    assert p["diffs"] == pytest.approx([0.10, 0.12, 0.11], abs=1e-9)
    assert p["mean"] == pytest.approx(0.11, abs=1e-3)
    assert p["half"] == pytest.approx(0.0248, abs=1e-3)
    assert (p["lo"], p["hi"]) == (pytest.approx(0.0852, abs=1e-3), pytest.approx(0.1348, abs=1e-3))
    assert p["excludes_zero"]
    line = mod.compare(grpo, rag, "GRPO", "Naive RAG (warm start, k=8)")
    assert line == ("GRPO vs Naive RAG (warm start, k=8): EM 0.340 vs 0.230; paired by seed "
                    "(0, 1, 2): ΔEM +0.100, +0.120, +0.110; mean +0.110, 95 % CI "
                    "[+0.085, +0.135]: excludes 0")
    # the other way round: the same interval, negated, still excludes 0
    q = mod.paired(rag, grpo)
    assert q["hi"] == pytest.approx(-0.0852, abs=1e-3) and q["excludes_zero"]


def test_paired_interval_that_includes_zero_and_pairs_only_common_seeds():
    mod = load("bench_agent_r1_table")
    grpo, warm = _seeds([0.26, 0.25, 0.30]), _seeds([0.20, 0.27, 0.28])
    # differences +0.06, -0.02, +0.02: mean 0.02, deviations ±0.04 and 0 -> sd 0.04,
    # half-width 4.303 * 0.04 / sqrt(3) = 0.0994 -> [-0.0794, +0.1194]
    p = mod.paired(grpo, warm)
    assert (p["lo"], p["hi"]) == (pytest.approx(-0.0794, abs=1e-3), pytest.approx(0.1194, abs=1e-3))
    assert not p["excludes_zero"]
    assert mod.compare(grpo, warm, "GRPO", "x").endswith(
        "mean +0.020, 95 % CI [-0.079, +0.119]: includes 0")
    # only the seeds both rows ran, in seed order; one common seed: no interval; none: None
    other = [{"seed": 7, "em": 0.9}, {"seed": 2, "em": 0.10}, {"seed": 0, "em": 0.16}]
    assert mod.paired(grpo, other)["diffs"] == pytest.approx([0.10, 0.20])
    assert mod.compare(grpo, other[:2], "a", "b").endswith(
        "paired by seed (2): ΔEM +0.200; one common seed: no interval")
    assert mod.paired(grpo, other[:1]) is None
    assert mod.compare(grpo, other[:1], "a", "b").endswith("no seed in common: not compared")


def test_paired_gain_over_the_warm_start():
    mod = load("bench_agent_r1_table")
    runs = [{"seed": 0, "em": 0.30, "before_em": 0.20}, {"seed": 1, "em": 0.10, "before_em": 0.15}]
    # gains +0.10, -0.05: mean +0.025, sd 0.075 * sqrt(2) = 0.1061, t975(1) = 12.706,
    # half-width 12.706 * 0.1061 / sqrt(2) = 0.953 -> [-0.928, +0.978]
    assert mod.paired_gain(runs, "GRPO") == (
        "GRPO minus Base Tool Call (warm start) at the same seed: paired by seed (0, 1): "
        "ΔEM +0.100, -0.050; mean +0.025, 95 % CI [-0.928, +0.978]: includes 0")
    assert mod.paired_gain(runs[:1], "PPO").endswith("(0): ΔEM +0.100; one common seed: no interval")


def test_table_cells():
    mod = load("bench_agent_r1_table")
    a = [{"em": 0.5, "f1": 0.6, "updates": 10, "rl_min": 5.0},
         {"em": 0.7, "f1": 0.8, "updates": 12, "rl_min": 5.0}]
    b = [{"em": 0.1, "f1": 0.2, "rag_k": 8}, {"em": 0.1, "f1": 0.2, "rag_k": 8}]
    md = mod.table({"GRPO": a, "Naive RAG (untrained, k=8)": b}, "t",
                   {"8": {"k": 8, "tasks": 145, "answer": 0.25, "support": 0.125}}, "test")
    assert "| method | test EM | test F1 |" in md
    # mean 0.6, sample sd of (0.5, 0.7) = 0.1414; no recall beside an RL row
    assert "| GRPO | 0.600 ± 0.141 | 0.700 ± 0.141 | 2 | 11 | 5.0 | - | - |" in md
    assert ("| Naive RAG (untrained, k=8) | 0.100 ± 0.000 | 0.200 ± 0.000 | 2 | - | - "
            "| 0.250 | 0.125 |") in md


def _results():
    """A table's results.json by hand: 3 seeds of every baseline and GRPO, 1 of PPO."""
    mod = load("bench_agent_r1_table")
    warm = _seeds([0.20, 0.22, 0.27])
    rag_u = _seeds([0.02, 0.03, 0.01], rag_k=8)
    rag_w = _seeds([0.15, 0.16, 0.17], rag_k=8)

    def rl(ems):
        return [{**r, "before_em": warm[r["seed"]]["em"], "before_f1": warm[r["seed"]]["f1"],
                 "updates": 7, "rl_min": 31.0, "curve": [[0.0, 0.2], [31.0, r["em"]]]}
                for r in _seeds(ems)]

    return mod, {
        "command": "python -m bench.bench_agent_r1_table", "date": "2026-11-27 00:00 UTC",
        "budget_s": 1800.0, "split": "test", "final_tasks": 145, "corpus_version": "2",
        "rag_k": 8, "retrieval_recall": {"8": {"k": 8, "tasks": 145, "answer": 0.262,
                                                "support": 0.214}},
        "title": "Multi-hop QA", "comparisons": [
            ["GRPO", "Naive RAG (warm start, k=8)"], ["GRPO", mod.BASE_WARM],
            ["GRPO", mod.BASE_UNTRAINED]],
        "rows": {  # not in table order on purpose
            "PPO (step GAE)": rl([0.31]), "GRPO": rl([0.30, 0.34, 0.38]),
            "Naive RAG (warm start, k=8)": rag_w, mod.BASE_WARM: warm,
            "Naive RAG (untrained, k=8)": rag_u, mod.BASE_UNTRAINED: _seeds([0.0, 0.0, 0.0])},
        "eval_noise": {"label": mod.BASE_WARM, "split": "test", "checkpoint": "/ckpt", "evals": [
            {"seed": 1000, "em": 0.241, "f1": 0.3}, {"seed": 0, "em": 0.2, "f1": 0.25},
            {"seed": 2000, "em": 0.186, "f1": 0.2}]},
    }


def test_rows_in_order_with_recall_beside_naive_rag_and_the_noise_line():
    mod, results = _results()
    md = mod.render(results)
    labels = [line.split(" | ")[0][2:] for line in md.splitlines()
              if line.startswith("| ") and not line.startswith("| method")]
    assert labels == ["Base Tool Call (untrained)", "Naive RAG (untrained, k=8)",
                      "Base Tool Call (warm start)", "Naive RAG (warm start, k=8)", "GRPO",
                      "PPO (step GAE)"]
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    for label in ("Naive RAG (untrained, k=8)", "Naive RAG (warm start, k=8)"):
        assert rows[label].endswith("| 0.262 | 0.214 |")
    for label in ("Base Tool Call (untrained)", "Base Tool Call (warm start)", "GRPO"):
        assert rows[label].endswith("| - | - |")
    assert "reported split: test (145 tasks, every row); corpus version 2;" in md
    # the three GRPO comparisons, then the gains over the warm start: GRPO vs Naive RAG (warm
    # start) is 0.15, 0.18, 0.21: mean 0.18, sd 0.03, half 4.303 * 0.03 / sqrt(3) = 0.0745
    assert ("- GRPO vs Naive RAG (warm start, k=8): EM 0.340 vs 0.160; paired by seed (0, 1, 2): "
            "ΔEM +0.150, +0.180, +0.210; mean +0.180, 95 % CI [+0.105, +0.255]: excludes 0") in md
    assert "- GRPO vs Base Tool Call (warm start): EM 0.340 vs 0.230;" in md
    assert "- GRPO vs Base Tool Call (untrained): EM 0.340 vs 0.000;" in md
    assert ("- GRPO minus Base Tool Call (warm start) at the same seed: paired by seed (0, 1, 2): "
            "ΔEM +0.100, +0.120, +0.110; mean +0.110, 95 % CI [+0.085, +0.135]: excludes 0") in md
    assert "- PPO (step GAE) minus Base Tool Call (warm start) at the same seed:" in md
    # the noise: seed order, max - min = 0.241 - 0.186 = 0.055; it feeds no row (3 seeds there)
    assert md.rstrip().endswith(
        "- Evaluation noise (Base Tool Call (warm start), test, sampling seeds 0, 1000, 2000): "
        "the same checkpoint evaluated 3 times: EM 0.200, 0.241, 0.186 (spread max-min 0.055)")
    assert "| Base Tool Call (warm start) | 0.230 ± 0.036 |" in md


def test_summarize_reproduces_the_table(tmp_path, monkeypatch):
    mod, results = _results()
    first = mod.write(tmp_path, results)
    written = (tmp_path / "results.json").read_text()
    assert (tmp_path / "table.md").read_text() == first and (tmp_path / "em_vs_time.png").exists()
    (tmp_path / "table.md").unlink()
    monkeypatch.setattr("sys.argv", ["bench_agent_r1_table", "--summarize", str(tmp_path)])
    mod.main()
    assert (tmp_path / "table.md").read_text() == first
    assert (tmp_path / "results.json").read_text() == written  # read, not rewritten


def test_former_labels_are_read_as_todays_rows():
    mod, results = _results()
    old = {**results, "rows": {"Base Tool Call": results["rows"][mod.BASE_UNTRAINED],
                               "Warm start (SFT)": results["rows"][mod.BASE_WARM],
                               "GRPO": results["rows"]["GRPO"]},
           "comparisons": [["GRPO", "Warm start (SFT)"]]}
    for key in ("split", "corpus_version", "retrieval_recall", "eval_noise"):
        del old[key]
    md = mod.render(old)
    assert "| Base Tool Call (untrained) |" in md and "| Base Tool Call (warm start) |" in md
    assert "reported split: dev (145 tasks, every row); corpus version unknown;" in md
    assert "- GRPO vs Base Tool Call (warm start): EM 0.340 vs 0.230;" in md


def test_main_runs_rows_in_order_adds_to_out_and_keeps_noise_apart(tmp_path, monkeypatch):
    """The whole bench with evaluations, warm start and launches replaced by fakes."""
    mod = load("bench_agent_r1_table")
    calls = []
    setup = {"split": "test", "final_tasks": 145, "corpus_version": "2", "rag_k": 8,
             "recall": {"k": 8, "tasks": 145, "answer": 0.262, "support": 0.214}}

    def final_eval(args, tag, seed, kind="", model=""):
        calls.append((tag, seed, kind, model, args.split, args.final_tasks, args.rag_k))
        extra = {"rag_k": args.rag_k} if kind == "naive_rag" else {}
        return {"em": 0.2 + seed / 1e5, "f1": 0.3, "split": args.split, **extra}

    def rl_run(args, name, seed, ckpt, extra, before):
        calls.append((name, seed, ckpt, extra, before["em"]))
        return {"before_em": before["em"], "before_f1": before["f1"], "em": 0.3, "f1": 0.4,
                "updates": 5, "rl_min": 30.0, "curve": [[0.0, 0.2], [30.0, 0.3]]}

    monkeypatch.setattr(mod, "split_setup", lambda args: setup)
    monkeypatch.setattr(mod, "final_eval", final_eval)
    monkeypatch.setattr(mod, "rl_run", rl_run)
    monkeypatch.setattr(mod, "warm_start_checkpoint", lambda args: "/ckpt")
    argv = ["b", "--out", str(tmp_path), "--seeds", "0", "1", "--algos", "grpo", "ppo"]
    monkeypatch.setattr("sys.argv", argv)
    mod.main()
    tags = [c[:2] for c in calls]
    assert tags == [("base_tool_call", 0), ("base_tool_call", 1), ("naive_rag-k8", 0),
                    ("naive_rag-k8", 1), ("warm_start", 0), ("warm_start", 1),
                    ("warm_naive_rag-k8", 0), ("warm_naive_rag-k8", 1),
                    ("warm_start-noise", 1000), ("warm_start-noise", 2000),
                    ("mh-grpo", 0), ("mh-grpo", 1), ("mh-ppo", 0)]
    assert all(c[4:] == ("test", 145, 8) for c in calls if len(c) == 7)  # every final eval
    assert calls[6][2:4] == ("naive_rag", "/ckpt")  # Naive RAG read by the warm start
    saved = json.loads((tmp_path / "results.json").read_text())
    assert list(mod.ordered(saved["rows"])) == [
        "Base Tool Call (untrained)", "Naive RAG (untrained, k=8)", "Base Tool Call (warm start)",
        "Naive RAG (warm start, k=8)", "GRPO", "PPO (step GAE)"]
    assert (saved["split"], saved["final_tasks"], saved["corpus_version"]) == ("test", 145, "2")
    assert saved["retrieval_recall"]["8"]["answer"] == 0.262
    # the noise: sampling seeds 0 (the row's own evaluation), 1000, 2000; the row keeps 2 seeds
    assert [e["seed"] for e in saved["eval_noise"]["evals"]] == [0, 1000, 2000]
    assert [r["seed"] for r in saved["rows"]["Base Tool Call (warm start)"]] == [0, 1]
    assert "the same checkpoint evaluated 3 times" in (tmp_path / "table.md").read_text()
    # the same OUT again: everything is done, nothing runs
    calls.clear()
    mod.main()
    assert calls == []
    # another split in the same OUT: refused
    monkeypatch.setattr(mod, "split_setup", lambda args: {**setup, "split": "dev"})
    with pytest.raises(SystemExit, match="another evaluation set"):
        mod.main()


def test_the_token_arm_alone_reuses_the_tables_grpo_and_warm_start_runs(tmp_path, monkeypatch):
    """`--credit-ablation --ablation-arms token`: one RL run per seed with credit token, the
    step arm and the warm start read from the table's results, process-off never run."""
    mod, results = _results()
    mod.write(tmp_path, results)
    setup = {k: results[k] for k in ("split", "final_tasks", "corpus_version", "rag_k")}
    monkeypatch.setattr(mod, "split_setup", lambda args: {**setup,
                                                          "recall": results["retrieval_recall"]["8"]})
    monkeypatch.setattr(mod, "warm_start_checkpoint", lambda args: "/ckpt")
    monkeypatch.setattr(mod, "final_eval", lambda *a, **k: pytest.fail("evaluated again"))
    calls = []

    def rl_run(args, tag, seed, ckpt, extra, before):
        calls.append((tag, seed, extra, before["em"]))
        return {"em": 0.1 * seed, "f1": 0.1 * seed, "before_em": before["em"],
                "before_f1": before["f1"], "updates": 3, "rl_min": 30.0,
                "curve": [[0.0, before["em"]], [30.0, 0.1 * seed]]}

    monkeypatch.setattr(mod, "rl_run", rl_run)
    monkeypatch.setattr("sys.argv", ["bench_agent_r1_table", "--credit-ablation",
                                     "--ablation-arms", "token", "--out", str(tmp_path)])
    mod.main()
    # the warm start's EM per seed, from the table: 0.20, 0.22, 0.27
    assert calls == [("abl-credittoken-processon", s, ["algorithm.credit=token"], em)
                     for s, em in ((0, 0.20), (1, 0.22), (2, 0.27))]
    saved = json.loads((tmp_path / "ablation" / "results.json").read_text())
    assert [r["em"] for r in saved["rows"][mod.SAME_AS_GRPO]] == [0.30, 0.34, 0.38]
    assert [r["em"] for r in saved["rows"]["GRPO credit=token, process on"]] == [0.0, 0.1, 0.2]
    assert "GRPO credit=step, process off" not in saved["rows"]
    assert saved["comparisons"] == [[mod.SAME_AS_GRPO, "GRPO credit=token, process on"]]

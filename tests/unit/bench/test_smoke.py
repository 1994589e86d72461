"""The benchmarks under bench/ import, and their pure model functions give hand-checked numbers.

No timing is asserted here: this only keeps the bench scripts from silently rotting.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import numpy as np
import pytest

MODULES = ["bench_async_vs_sync", "bench_transport", "bench_weight_sync", "bench_engines",
           "bench_learner", "bench_vs_trl", "bench_buffer", "bench_learning",
           "bench_tool_overhead", "bench_delta_records", "bench_sft_vs_rl",
           "bench_context_builders", "bench_learner_long_sequences", "bench_episode_sampler", "bench_staleness_bias",
           "bench_shared_prefix", "bench_busy_wait", "bench_engine_speed", "bench_stragglers",
           "bench_tree_cost", "bench_precision_auto", "bench_world_demonstrators",
           "bench_twx_gold_paths", "bench_zero_skip"]


def load(name: str) -> ModuleType:
    """bench/NAME.py as the module `python -m bench.NAME` runs."""
    return importlib.import_module(f"bench.{name}")


@pytest.mark.parametrize("name", MODULES)
def test_bench_module_imports_and_has_main(name: str) -> None:
    mod = load(name)
    assert callable(mod.main)
    assert mod.__doc__ is not None and f"-m bench.{name}" in mod.__doc__  # documents its command


def test_bench_is_a_package_run_by_module_name() -> None:
    """`python -m bench.NAME` from the repo root: no bench file edits sys.path to find it."""
    import bench

    assert Path(bench.__file__).name == "__init__.py"
    for path in Path(bench.__file__).parent.glob("*.py"):
        assert "sys.path" not in path.read_text(), path


def test_makespan_list_scheduling_by_hand() -> None:
    makespan = load("bench_async_vs_sync").makespan
    # 2 slots: 3 -> slot A (ends 3); 1,1,1 -> slot B ends 1, 2, 3  => 3
    assert makespan([3, 1, 1, 1], 2) == 3.0
    # 2 slots: 2, 2 fill both; 1 goes to the first free (t=2) => 3
    assert makespan([2, 2, 1], 2) == 3.0
    # more slots than jobs: the longest job
    assert makespan([0.5, 2.5, 1.0], 8) == 2.5
    # one slot: the sum
    assert makespan([1, 2, 3], 1) == 6.0
    with pytest.raises(ValueError, match="slots"):
        makespan([1.0], 0)


def test_ideal_speedup_with_deterministic_durations() -> None:
    ideal = load("bench_async_vs_sync").ideal_per_update
    d = np.ones((10, 4))  # every group takes 1 s, batch of B = 4 groups, U = 0.5 s
    # 16 slots, k = 2: sync = E[max of 4] + U = 1.5; async = max(U, 4·1/min(16, 12)) = 0.5
    assert ideal(d, 16, 2, 0.5) == pytest.approx((1.5, 0.5))
    # 1 slot: sync = 4 groups in a row + U = 4.5; async = max(0.5, 4/1) = 4
    assert ideal(d, 1, 2, 0.5) == pytest.approx((4.5, 4.0))
    # 2 slots, k = 0: sync = 2 rounds + U = 2.5; async bound = max(0.5, 4/min(2, 4)) = 2
    assert ideal(d, 2, 0, 0.5) == pytest.approx((2.5, 2.0))
    # 4 slots, k = 0 (the window is one batch): sync 1.5; async max(0.5, 4/4) = 1
    assert ideal(d, 4, 0, 0.5) == pytest.approx((1.5, 1.0))


def test_group_durations_without_spread_are_the_median() -> None:
    mod = load("bench_async_vs_sync")
    w = mod.Workload(median_s=0.1, sigma=0.0, batch_groups=4, update_s=0.2)
    d = mod.draw_group_durations(w, trials=50)
    assert d.shape == (50, 4)
    assert np.allclose(d, 0.1)
    # sync = 0.1 + 0.2; async = max(0.2, 4·0.1/12)
    assert mod.ideal_per_update(d, 16, 2, w.update_s) == pytest.approx((0.3, 0.2))


def test_flops_params_counts_a_tied_head_once() -> None:
    torch = pytest.importorskip("torch")
    flops_params = load("learner_common").flops_params

    class Tiny(torch.nn.Module):
        def __init__(self, tied: bool) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)  # 40
            self.mid = torch.nn.Linear(4, 4)  # 20
            self.head = torch.nn.Linear(4, 10, bias=False)  # 40 (or the embedding's 40)
            if tied:
                self.head.weight = self.emb.weight

        def get_input_embeddings(self):
            return self.emb

        def get_output_embeddings(self):
            return self.head

    # untied: 100 params − 40 input embedding = 60; tied: 60 params − 40 + 40 (head) = 60
    assert flops_params(Tiny(tied=False)) == 60
    assert flops_params(Tiny(tied=True)) == 60


def test_learner_update_runs_with_the_bench_sleep_trainer() -> None:
    """`Learner(..., trainer=...)` skips model loading; the async bench relies on it."""
    pytest.importorskip("torch")
    from agent_r1_async.config import AlgorithmConfig, RunConfig
    from agent_r1_async.learner.loop import Learner
    from agent_r1_async.wire import messages as m
    from tests.fakes.learner import FakeSource
    from tests.fakes.records import episode, sample_batch, step

    def one_step(e: int, reward: float) -> m.Episode:
        s = step(f"e{e}", "g0", 0, context_ids=[5, 6, 7], action_ids=[8, 9],
                 behavior_logprobs=[-0.5, -0.25], done=True)
        return episode(f"e{e}", "g0", [s], reward)

    source = FakeSource(batch=sample_batch([[one_step(0, 1.0), one_step(1, 0.0)]]))
    cfg = RunConfig(algorithm=AlgorithmConfig(group_size=2, batch_groups=1))
    trainer = load("bench_async_vs_sync").SleepTrainer(0.0)
    learner = Learner(cfg, source, None, None, trainer=trainer)
    metrics = learner.update()
    assert learner.trainer is trainer
    # one version step, told to the source; 2 episodes of 1 step each = 2 rows, and the GRPO
    # advantages of rewards (1, 0) are ±a, so their mean is 0
    assert (learner.version, source.version) == (1, 1)
    assert metrics["rows"] == 2.0 and metrics["episodes"] == 2.0
    assert metrics["advantage_mean"] == pytest.approx(0.0)
    assert metrics["reward_mean"] == pytest.approx(0.5)
    assert metrics["staleness_mean"] == 0.0


def test_learning_summary_from_a_run_directory(tmp_path: Path) -> None:
    import json

    run = tmp_path / "learn-s3-20261122-000000"
    run.mkdir()
    rows = [
        {"update": 0, "time": 60.0, "eval/before/success": 0.25},
        {"update": 1, "time": 120.0, "reward/mean": 0.5, "env/success": 0.25,
         "learner/update_time_s": 50.0, "learner/peak_memory_gb": 4.1},
        {"update": 2, "time": 240.0, "reward/mean": 1.0, "env/success": 0.75,
         "learner/update_time_s": 70.0, "learner/peak_memory_gb": 4.3},
        {"update": 2, "time": 300.0, "eval/after/success": 0.5},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "eval.json").write_text(json.dumps({
        "before": {"success": 0.25, "episodes": 200.0, "version": 0},
        "after": {"success": 0.5, "episodes": 200.0, "version": 2}}))
    summary = load("bench_learning").summarize(run, "success")
    assert summary["before"] == 0.25 and summary["after"] == 0.5
    assert summary["gain"] == pytest.approx(0.25) and summary["tasks"] == 200
    # RL time: last update (240 s) minus the held-out evaluation before it (60 s) = 3 min.
    assert summary["updates"] == 2 and summary["rl_min"] == pytest.approx(3.0)
    assert summary["curve"] == [(1, 0.5, 0.25), (2, 1.0, 0.75)]
    assert summary["s_per_update"] == 60.0 and summary["peak_gb"] == 4.3  # median 50, 70; max


def test_launch_pairs_steady_state_leaves_the_first_update_out() -> None:
    from bench.launch_pairs import steady_state

    def upd(t: float, wait: float, flat: int) -> dict:
        return {"time": t, "learner/update_time_s": 10.0, "learner/data_wait_s": wait,
                "learner/episodes": 16, "learner/tokens_computed": 300, "learner/tokens_flat": flat,
                "learner/zero_advantage_frac": flat / 2000}

    records = [{"time": 50.0, "actors/tokens_per_s": 999.0},  # before the first update: out
               upd(100.0, 9.0, 1000), {"time": 105.0, "actors/tokens_per_s": 60.0},
               upd(110.0, 1.0, 1000), {"time": 115.0, "actors/tokens_per_s": 80.0},
               upd(120.0, 0.0, 500)]
    row = steady_state(records)
    # updates 2 and 3: 32 episodes over 120 - 100 s; busy 9 and 10 s; idle 1 of 20 s
    assert row["samples_per_s"] == pytest.approx(1.6)
    assert row["update_s"] == pytest.approx(9.5)
    assert row["idle"] == pytest.approx(0.05)
    assert row["computed"] == pytest.approx(600 / 1500)
    assert row["gen_tok_s"] == pytest.approx(70.0)
    assert row["zero_adv"] == pytest.approx((0.5 + 0.25) / 2)
    with pytest.raises(ValueError, match="2 updates logged"):
        steady_state(records[:4])


def test_transport_runs_pair_each_transport_run_with_its_like_for_like_baseline() -> None:
    mod = load("bench_transport")
    assert mod.schedule([16, 1]) == [("raw", 1), ("transport", 1), ("transport", 16),
                                     ("raw_coalesced", 16)]
    assert mod.schedule([1]) == [("raw", 1), ("transport", 1)]
    assert mod.like_for_like(1) == "raw"
    assert mod.like_for_like(16) == "raw_coalesced"


def test_tool_overhead_summary_and_native_baselines_by_hand() -> None:
    import asyncio

    from agent_r1_async.envs.base import Task

    mod = load("bench_tool_overhead")
    # rounds of 2 s vs 1 s, then 3 s vs 1 s: ratios 2, 3 (mean 2.5); extra 1e6, 2e6 µs;
    # pooled foreign [2, 2, 2, 3, 3, 3] s: median 2.5 s, p90 at position 4.5 of 0..5 = 3 s
    s = mod.summarize([[2.0] * 3, [3.0] * 3], [[1.0] * 3, [1.0] * 3])
    assert (s["ratio"], s["extra"]) == pytest.approx((2.5, 1.5e6))
    assert (s["f_n"], s["f_med"], s["f_p90"], s["n_med"]) == pytest.approx((6, 2.5e6, 3e6, 1e6))
    # the native tool answers as the MCP server's SDK does: str of a float
    assert asyncio.run(mod.NativeConvert().call(value=3, from_unit="km", to_unit="m")) == "3000.0"
    # the native game: binary search from 8 wins, the last step carries the outcome
    env = mod.NativeGuessEnv("sys", "last")
    from examples.openenv_guess_server import oracle

    task = Task("t", "seed 0", None, {"reset": {"seed": 0}})
    obs = asyncio.run(env.reset(task))
    assert [m["role"] for m in obs.messages] == ["system", "user"]
    results = [asyncio.run(env.step(a)) for a in oracle({"seed": 0})]
    assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
    assert results[-1].outcome_reward == 1.0 and results[-1].metrics["solved"] == 1.0


def test_sft_vs_rl_metric_and_horizon_buckets_by_hand(tmp_path: Path) -> None:
    import json

    mod = load("bench_sft_vs_rl")
    rows = [  # optimal_len 6 solved, 15 failed, 18 solved, 35 solved, an env_error (no metrics)
        {"metrics": {"success": 1.0, "optimal_len": 6}},
        {"metrics": {"success": 0.0, "optimal_len": 15}},
        {"metrics": {"success": 1.0, "optimal_len": 18}},
        {"metrics": {"success": 1.0, "optimal_len": 35}},
        {"metrics": {}},
    ]
    assert mod.metric_of(rows, "success") == pytest.approx(3 / 5)  # a failed episode counts 0
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert mod.horizon(str(path), [10, 20, 40, 80], "success") == [
        {"le": 10, "episodes": 1, "metric": 1.0},
        {"le": 20, "episodes": 2, "metric": 0.5},
        {"le": 40, "episodes": 1, "metric": 1.0},
    ]


def test_sft_vs_rl_names_committed_rows_from_the_repository(tmp_path: Path) -> None:
    mod = load("bench_sft_vs_rl")
    from bench.cli_runs import ROOT

    inside = ROOT / "bench" / "results" / "x" / "evals" / "a.jsonl"
    assert mod._in_repo(inside) == "bench/results/x/evals/a.jsonl"  # any checkout reads it
    assert mod._in_repo(tmp_path / "a.jsonl") == str(tmp_path / "a.jsonl")


def test_sft_vs_rl_rl_time_runs_from_the_processes_to_the_final_checkpoint(
        tmp_path: Path) -> None:
    import os

    rl_wall_s = load("bench_sft_vs_rl").rl_wall_s
    final = tmp_path / "checkpoints" / "step-3"
    final.mkdir(parents=True)
    updates = [{"time": 700.0}, {"time": 1500.0}]  # two logged updates; a third ran at the stop
    assert rl_wall_s(tmp_path, final, []) == 0.0
    assert rl_wall_s(tmp_path, final, updates) == 800.0  # no startup.json: first to last update
    (tmp_path / "startup.json").write_text(json.dumps(
        {"started": 1000.0, "phases": [["preflight", 1010.0], ["processes", 1070.0]]}))
    assert rl_wall_s(tmp_path, final, updates) == 800.0  # no manifest yet: the same
    (final / "manifest.json").write_text("{}")
    os.utime(final / "manifest.json", (3020.0, 3020.0))
    assert rl_wall_s(tmp_path, final, updates) == 3020.0 - 1070.0


def test_sft_vs_rl_best_cell_by_metric_then_tiebreak_then_fewer_steps() -> None:
    best_of = load("bench_sft_vs_rl").best_of
    cells = {
        "d32-e2": {"demos": 32, "epochs": 2, "steps": 8, "metric": 0.0, "tiebreak": 0.028},
        "d32-e4": {"demos": 32, "epochs": 4, "steps": 16, "metric": 0.0, "tiebreak": 0.034},
    }
    assert best_of(cells)["epochs"] == 4  # success ties at 0: progress decides
    cells["d64-e1"] = {"demos": 64, "epochs": 1, "steps": 8, "metric": 0.1, "tiebreak": 0.01}
    assert best_of(cells) == {"demos": 64, "epochs": 1, "steps": 8, "metric": 0.1}
    cells["d32-e8"] = {"demos": 32, "epochs": 8, "steps": 32, "metric": 0.1, "tiebreak": 0.01}
    assert best_of(cells)["demos"] == 64  # a full tie: the fewer optimizer steps


def test_machine_line_says_whether_the_cpu_has_amx() -> None:
    from bench.stats import cpu_and_amx, machine_kind, machine_line

    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), "")
    amx = "amx_bf16" in flags.split()
    assert machine_line().endswith(", AMX" if amx else ", no AMX")
    name = next(line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    assert cpu_and_amx() == (name, amx)  # lscpu's "Model name" is this field
    assert machine_kind(machine_line()) == f"{name}, {'AMX' if amx else 'no AMX'}"
    assert machine_kind("AMD EPYC (family 26 model 2 stepping 1), 2 cores, no AMX") == (
        "AMD EPYC, no AMX")
    assert machine_kind("Intel(R) Xeon(R) Processor (family 6 model 207 stepping 2), "
                        "2 cores, AMX") == "Intel(R) Xeon(R) Processor, AMX"
    assert machine_kind("") == ""


def test_utc_date_by_hand() -> None:
    from bench.stats import utc_date

    assert utc_date(0) == "1970-01-01 00:00 UTC"
    assert utc_date(86400 + 3600 * 13 + 60 * 7 + 59) == "1970-01-02 13:07 UTC"


def test_delta_records_bench_builds_an_episode_whose_deltas_add_up() -> None:
    mod = load("bench_delta_records")
    from agent_r1_async.wire.delta import resolve_contexts

    recs = mod.episode_records(5, prompt=7, action=3, obs=2, delta=True, seed=1)
    steps = recs[:-1]
    # step i's context: 7 + i × (3 + 2) tokens; a delta carries the 2 observation tokens
    assert [len(c) for c in resolve_contexts(steps)] == [7, 12, 17, 22, 27]
    assert [len(s.context_ids) for s in steps] == [7, 2, 2, 2, 2]
    whole = mod.episode_records(5, prompt=7, action=3, obs=2, delta=False, seed=1)[:-1]
    assert resolve_contexts(steps) == [list(s.context_ids) for s in whole]


def test_long_sequence_bench_packs_each_episode_into_one_budget_sized_sequence() -> None:
    import argparse

    mod = load("bench_learner_long_sequences")
    args = argparse.Namespace(steps=100, instruction=470, action=20, observations=[40, 30, 20],
                              set=[])
    # 470 + 99 x (20 + 40) + 20 = 6,430; with 30- and 20-token observations 5,440 and 4,450
    assert [mod.episode_length(args, o) for o in args.observations] == [6430, 5440, 4450]
    # the budget: the longest rounded up to 256 = 6,656, as max_model_len and micro-batch
    assert "model.max_model_len=6656" in mod.overrides(args)
    assert "learner.micro_batch_tokens=6656" in mod.overrides(args)
    rows = mod.synthetic_episode_rows(argparse.Namespace(**{**vars(args), "steps": 3}), 1000, 0, 4)
    # each context = the previous context + action + observation: 470, 494, 518 tokens
    assert [len(r.context_ids) for r in rows] == [470, 494, 518]
    assert all(rows[t + 1].context_ids[:rows[t].length] == [*rows[t].context_ids,
                                                            *rows[t].action_ids]
               for t in range(2))


def test_episode_sampler_bench_batches_resolve_and_carry_failed_episodes() -> None:
    import argparse

    from agent_r1_async.learner.batching import trainable_groups
    from agent_r1_async.wire.delta import resolve_contexts

    args = argparse.Namespace(episodes=2, steps=3, prompt=10, action=4, obs=3)
    batch = load("bench_episode_sampler").SyntheticSource(args, vocab=100).sample(2, 5, 0.0, 2)
    assert len(trainable_groups(batch)) == 2 and len(batch.failed) == 2
    steps = batch.groups[0].episodes[0].steps
    assert [len(c) for c in resolve_contexts(steps)] == [10, 17, 24]
    assert batch.failed[0].end.status == "env_error"


def test_sft_vs_rl_summary_pairs_the_filtered_arm_with_rl_step(tmp_path: Path) -> None:
    import argparse
    import json

    mod = load("bench_sft_vs_rl")
    rows = tmp_path / "rows.jsonl"  # multi-hop rows: no optimal_len, so no horizon curve
    rows.write_text(json.dumps({"metrics": {"em": 1.0}}) + "\n")
    arms = {str(s): {arm: {"metric": m, "updates": 10, "rows": str(rows)}
                     for arm, m in ms.items()}
            for s, ms in {0: {"rl_step": 0.80, "rl_filter": 0.85},
                          1: {"rl_step": 0.70, "rl_filter": 0.78}}.items()}
    (tmp_path / "arms.json").write_text(json.dumps(arms))
    args = argparse.Namespace(out=tmp_path, config=Path("configs/multihop.yaml"), metric="em",
                              split="test", horizon_bins=[10], figure=None)
    text = mod.summarize(args)
    # differences +0.05 and +0.08: mean +0.065, sd 0.0212, t(1) 12.706 × 0.0212 / √2 = 0.1906
    assert ("- rl_filter − rl_step, paired by seed (+0.050, +0.080): mean +0.065, "
            "95 % t [-0.126, +0.256]") in text
    assert "| rl_filter | s0 0.850, s1 0.780 | 0.815 ± 0.049 | 10, 10 |" in text


def test_sft_vs_rl_pairs_arms_by_task_within_a_seed_by_hand(tmp_path: Path) -> None:
    import json

    mod = load("bench_sft_vs_rl")

    def rows(name: str, eps: list[tuple[str, dict[str, float]]]) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"task_id": t, "metrics": m}) + "\n" for t, m in eps))
        return str(path)

    # a: t1 twice (1, 0: 0.5), t2 0, t3 1, t4 failed (no metrics: 0); b: t1 0, t2 0, t3 1, t4 1,
    # and t5, which a did not evaluate
    a = rows("a.jsonl", [("t1", {"success": 1.0}), ("t1", {"success": 0.0}),
                         ("t2", {"success": 0.0}), ("t3", {"success": 1.0}), ("t4", {})])
    b = rows("b.jsonl", [(t, {"success": s}) for t, s in
                         [("t1", 0.0), ("t2", 0.0), ("t3", 1.0), ("t4", 1.0), ("t5", 1.0)]])
    # diffs 0.5, 0, 0, -1: mean -0.125, sd sqrt(1.1875 / 3) = 0.629153, se 0.314576,
    # t(3) from the table, 3.182, × se = 1.000982
    n, m, lo, hi = mod.paired_by_task(a, b, "success")
    assert n == 4 and m == pytest.approx(-0.125)
    assert (lo, hi) == (pytest.approx(-1.125982, abs=1e-6), pytest.approx(0.875982, abs=1e-6))
    no_ids = tmp_path / "multihop.jsonl"
    no_ids.write_text(json.dumps({"metrics": {"em": 1.0}}) + "\n")
    assert mod.paired_by_task(str(no_ids), b, "success") is None
    assert mod.paired_by_task(rows("one.jsonl", [("t1", {"success": 1.0})]), b, "success") is None


def test_sft_vs_rl_horizon_curve_shows_sft_continued_beside_best_sft_and_rl(
        tmp_path: Path) -> None:
    import argparse
    import json

    mod = load("bench_sft_vs_rl")
    per_arm = {  # (optimal_len, success) per episode
        "best_sft": [(2, 1), (3, 0), (3, 1), (6, 0)],
        "sft_continued": [(2, 1), (3, 1), (3, 1), (6, 1)],
        "rl_step": [(2, 1), (3, 1), (4, 1), (6, 0)],
    }
    arms: dict[str, dict[str, object]] = {}
    for arm, eps in per_arm.items():
        path = tmp_path / f"{arm}.jsonl"
        path.write_text("".join(json.dumps({"metrics": {"success": float(s), "optimal_len": n}})
                                + "\n" for n, s in eps))
        arms[arm] = {"metric": sum(s for _, s in eps) / len(eps), "updates": 2, "rows": str(path)}
    (tmp_path / "arms.json").write_text(json.dumps({"0": arms}))
    args = argparse.Namespace(out=tmp_path, config=Path("configs/twx_coin.yaml"),
                              metric="success", split="test", horizon_bins=[2, 4, 7],
                              figure=None)
    mod.summarize(args)
    curves = json.loads((tmp_path / "horizon.json").read_text())
    def curve(*metrics: float) -> list[list[dict[str, float]]]:
        # buckets (0, 2], (2, 4], (4, 7]: 1, 2 and 1 episodes
        return [[{"le": le, "episodes": n, "metric": m}
                 for (le, n), m in zip([(2, 1), (4, 2), (7, 1)], metrics, strict=True)]]

    assert curves == {"best_sft": curve(1.0, 0.5, 0.0), "sft_continued": curve(1.0, 1.0, 1.0),
                      "rl_step": curve(1.0, 1.0, 0.0)}
    assert (tmp_path / "success_vs_horizon.png").stat().st_size > 0
    args.figure = tmp_path / "docs" / "coin_horizon.png"  # --figure: where README's figures live
    assert "docs/coin_horizon.png, horizon.json" in mod.summarize(args)
    assert args.figure.stat().st_size > 0


def test_context_builders_bench_configs_load_and_the_table_pairs_compact_by_hand(
        tmp_path: Path) -> None:
    import argparse
    import json

    from agent_r1_async.config import load_config

    mod = load("bench_context_builders")
    for builder, keys in mod.BUILDERS.items():  # every cell's config passes validation
        cfg = load_config("configs/world.yaml", [*mod.WINDOW, *keys])
        assert cfg.context.builder == builder and cfg.model.max_model_len == 1024
    rows = {  # (progress, success, steps, compactions) per episode, two episodes per file
        ("compact", 0): [(0.5, 1.0, 40, 3), (0.3, 0.0, 100, 8)],
        ("compact", 1): [(0.6, 0.0, 100, 9), (0.2, 0.0, 100, 9)],
        ("last_k", 0): [(0.1, 0.0, 100, None), (0.3, 0.0, 100, None)],
        ("last_k", 1): [(0.0, 0.0, 100, None), (0.2, 0.0, 100, None)],
    }
    for builder in ("compact", "last_k"):
        arms: dict[str, dict] = {}
        for seed in (0, 1):
            path = tmp_path / f"{builder}-{seed}.jsonl"
            lines = []
            for progress, success, steps, n in rows[(builder, seed)]:
                metrics = {"progress": progress, "success": success}
                if n is not None:
                    metrics.update({"context/compactions": n, "context/summary_tokens": 100.0,
                                    "context/success_after_compaction": success})
                lines.append(json.dumps({"steps": steps, "metrics": metrics}))
            path.write_text("\n".join(lines) + "\n")
            arms[str(seed)] = {"rl_step": {"rows": str(path), "metric": 0.0}}
        (tmp_path / builder).mkdir()
        (tmp_path / builder / "arms.json").write_text(json.dumps(arms))
    args = argparse.Namespace(out=tmp_path, metric="progress", demos=16, epochs=2, updates=2)
    text = mod.summarize(args)
    # compact: progress 0.4 and 0.4 (sd 0), success 0.25, steps 85, compactions 7.25
    assert ("| compact | rl_step | s0 0.400, s1 0.400 | 0.400 ± 0.000 | 0.25 | 85.00 | 7.25 | "
            "100.00 | 0.25 |") in text
    assert "| last_k | rl_step | s0 0.200, s1 0.100 | 0.150 ± 0.071 | 0.00 | 100.00 | – |" in text
    # differences +0.2, +0.3: mean +0.25, sd 0.0707, t(1) 12.706 × 0.0707 / √2 = 0.635
    assert ("- rl_step: compact − last_k, paired by seed (+0.200, +0.300): mean +0.250, "
            "95 % t [-0.385, +0.885]") in text
    assert "truncate" not in text.split("\n\n", 2)[2]  # no truncate cell: no row, no pair


def test_tree_cost_bench_group_plans_by_hand() -> None:
    import argparse

    mod = load("bench_tree_cost")
    args = argparse.Namespace(members=4, steps=24, instruction=470, action=20, observation=40)
    rows = mod.group_rows(args, vocab=5000)
    # a packed member: 470 + 23 × (20 + 40) + 20 = 1,870 tokens, its suffix 1,400 after the
    # shared prompt. ρ = 0: one row of 470 + 4 × 1,400 = 6,070 (≤ 8,192). ρ = 3.254e-4: two
    # joined, 3,270 + ρ·3,270² = 6,750 > 2 × (1,870 + ρ·1,870²) = 6,016, so all stay apart.
    trees, mbs = mod.plan(rows, 8192, 0.0)
    assert [t.tokens for t in trees] == [6070] and len(mbs) == 1
    trees, mbs = mod.plan(rows, 8192, 3.254e-4)
    assert [t.tokens for t in trees] == [1870] * 4


def test_sft_vs_rl_reevaluates_a_sweep_cell_keeping_its_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import types

    mod = load("bench_sft_vs_rl")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cells = {"d32-e1": {"demos": 32, "epochs": 1, "checkpoint": str(ckpt), "sft_s": 567.3,
                        "metric": 0.0, "tiebreak": -0.02, "date": "2026-11-29 14:59 UTC"},
             "d32-e2": {"demos": 32, "epochs": 2, "checkpoint": str(tmp_path / "gone"),
                        "metric": 0.0, "date": "2026-11-30 02:16 UTC"}}
    calls: list[tuple[str, str, str, int, int]] = []

    def evaluate(args, name, model, split, tasks, seed):  # type: ignore[no-untyped-def]
        calls.append((name, model, split, tasks, seed))
        return {"metric": 0.1, "tiebreak": 0.3, "episodes": tasks, "split": split}

    monkeypatch.setattr(mod, "evaluate", evaluate)
    args = argparse.Namespace(dev_tasks=30, metric="success", tiebreak="progress")
    cfg = types.SimpleNamespace(env=types.SimpleNamespace(eval_split="dev"))
    mod.reevaluate(args, cfg, cells, "d32-e1")
    assert calls == [("sweep-d32-e1", str(ckpt), "dev", 30, 0)]  # the sweep's own tasks, seed 0
    cell = cells["d32-e1"]
    assert (cell["metric"], cell["tiebreak"], cell["metric_before"]) == (0.1, 0.3, 0.0)
    assert (cell["sft_s"], cell["trained"]) == (567.3, "2026-11-29 14:59 UTC")
    assert cell["date"] != "2026-11-29 14:59 UTC"
    mod.reevaluate(args, cfg, cells, "d32-e1")  # again: the first metric and date stay
    assert (cell["metric_before"], cell["trained"]) == (0.0, "2026-11-29 14:59 UTC")
    with pytest.raises(SystemExit, match="d32-e2: no sweep cell with its checkpoint"):
        mod.reevaluate(args, cfg, cells, "d32-e2")  # its checkpoint is not on disk
    with pytest.raises(SystemExit, match="cells: d32-e1, d32-e2"):
        mod.reevaluate(args, cfg, cells, "d64-e1")


@pytest.mark.parametrize(("patience", "visited", "best"), [
    (1, ["d32-e1", "d32-e2", "d64-e1", "d64-e2"], "d64-e1"),
    (2, ["d32-e1", "d32-e2", "d32-e4", "d32-e8", "d64-e1", "d64-e2", "d64-e4"], "d32-e4"),
])
def test_sft_vs_rl_sweep_stops_after_patience_cells_without_a_rise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patience: int,
        visited: list[str], best: str) -> None:
    import argparse

    mod = load("bench_sft_vs_rl")
    # (success, progress) per cell: d32 dips at e2, rises at e4 (the best of all), dips at
    # e8; d64 peaks at e1 and then dips twice.
    scores = {"d32-e1": (0.0, 0.026), "d32-e2": (0.0, 0.019), "d32-e4": (0.1, 0.30),
              "d32-e8": (0.1, 0.25), "d64-e1": (0.0, 0.05), "d64-e2": (0.0, 0.01),
              "d64-e4": (0.0, 0.0)}
    trained: list[tuple[str, list[str]]] = []

    def sft(args, name, overrides):  # type: ignore[no-untyped-def]
        trained.append((name.removeprefix("sweep-"), overrides))
        ckpt = tmp_path / name
        ckpt.mkdir()
        return str(ckpt), {"sft_steps": 4, "sft_s": 1.0}

    def evaluate(args, name, model, split, tasks, seed):  # type: ignore[no-untyped-def]
        metric, tiebreak = scores[name.removeprefix("sweep-")]
        return {"metric": metric, "tiebreak": tiebreak, "episodes": tasks, "split": split}

    monkeypatch.setattr(mod, "sft", sft)
    monkeypatch.setattr(mod, "evaluate", evaluate)
    args = argparse.Namespace(config=mod.ROOT / "configs/world.yaml", overrides=[],
                              out=tmp_path / "out", reevaluate=[], demos=[32, 64],
                              max_epochs=8, patience=patience, dev_tasks=30,
                              metric="success", tiebreak="progress")
    cells = mod.sweep(args)
    assert [name for name, _ in trained] == visited
    best_cell = json.loads((tmp_path / "out/best.json").read_text())
    assert f"d{best_cell['demos']}-e{best_cell['epochs']}" == best
    # each doubling trains on from the cell before it, one that scored lower included
    resumes = {name: [o for o in overrides if o.startswith("sft.resume_from=")]
               for name, overrides in trained}
    assert resumes["d32-e1"] == []
    assert resumes["d32-e2"] == [f"sft.resume_from={tmp_path / 'sweep-d32-e1'}"]
    if patience == 2:
        assert resumes["d32-e4"] == [f"sft.resume_from={tmp_path / 'sweep-d32-e2'}"]
        assert cells["d32-e4"]["resumed_from"] == "d32-e2"


def test_sft_vs_rl_reads_an_sft_runs_demonstrations_steps_and_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    mod = load("bench_sft_vs_rl")
    stdout = (  # what `agent-r1-async sft` prints (a run of sft_continued)
        "[sft] run dir /r/sft_continued-s0; model /r/best-s0/checkpoints/step-16\n"
        "[sft] 872 demonstrations from jsonl: 1744 steps, 624684 tokens (dropped: failed 0, "
        "no oracle 0, too long 0)\n"
        "[sft] 103 steps in 542.8 s; checkpoint /r/sft_continued-s0/checkpoints/step-103\n")
    monkeypatch.setattr(mod, "run_logged", lambda cmd, log: stdout)
    args = argparse.Namespace(config=Path("c.yaml"), overrides=[], out=tmp_path)
    assert mod.sft(args, "sft_continued-s0", []) == (
        "/r/sft_continued-s0/checkpoints/step-103",
        {"sft_steps": 103, "sft_s": 542.8, "sft_demos": 872})


def test_sft_vs_rl_sweep_removes_a_checkpoint_once_a_longer_cell_trained_on_from_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import json

    mod = load("bench_sft_vs_rl")
    trained: list[list[str]] = []

    def fake_sft(args, name, overrides):  # a run directory with its checkpoints/ as sft makes
        trained.append(overrides)
        ckpt = tmp_path / "runs" / name / "checkpoints" / "step-1"
        ckpt.mkdir(parents=True)
        (ckpt.parent.parent / "metrics.jsonl").write_text("{}\n")
        return str(ckpt), {"sft_steps": 1, "sft_s": 1.0, "sft_demos": 32}

    dev = {"sweep-d32-e1": 0.5, "sweep-d32-e2": 0.7, "sweep-d32-e4": 0.6}  # e4 ends the series
    monkeypatch.setattr(mod, "sft", fake_sft)
    monkeypatch.setattr(mod, "evaluate", lambda args, name, *a: {"metric": dev[name]})
    args = argparse.Namespace(config=Path("configs/default.yaml"), overrides=[], out=tmp_path,
                              reevaluate=[], demos=[32], max_epochs=8, patience=1,
                              dev_tasks=10, metric="success", tiebreak=None)
    cells = mod.sweep(args)
    run = {k: tmp_path / "runs" / f"sweep-{k}" for k in cells}
    # e2 trained on from e1's checkpoint and e4 from e2's: those two go, their runs' files stay
    assert [o[-1].split("/runs/")[-1] for o in trained[1:]] == [
        "sweep-d32-e1/checkpoints/step-1", "sweep-d32-e2/checkpoints/step-1"]
    assert [(run[k] / "checkpoints").is_dir() for k in ("d32-e1", "d32-e2", "d32-e4")] == [
        False, False, True]
    assert all((run[k] / "metrics.jsonl").is_file() for k in cells)
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert ["checkpoint_removed" in saved[k] for k in ("d32-e1", "d32-e2", "d32-e4")] == [
        True, True, False]
    assert json.loads((tmp_path / "best.json").read_text())["epochs"] == 2
    # only a directory named checkpoints is ever removed, and --keep-checkpoints keeps it
    other = tmp_path / "elsewhere" / "step-1"
    other.mkdir(parents=True)
    assert not mod.drop_checkpoints(args, str(other)) and other.is_dir()
    kept = run["d32-e4"] / "checkpoints" / "step-1"
    assert not mod.drop_checkpoints(argparse.Namespace(keep_checkpoints=True), str(kept))
    assert mod.drop_checkpoints(args, str(kept)) and not kept.parent.exists()


class FakeCli:
    """`run_logged` for bench_sft_vs_rl's `sft`, `launch` and `eval` commands: an sft or a
    launch makes a checkpoint directory under `launch.run_root`/`launch.name` and prints what
    the CLI prints; an eval writes one row per task to --episodes-out. Every command line is
    kept."""

    def __init__(self) -> None:
        self.cmds: list[list[str]] = []
        self.weights_sha = "ab" * 32
        """model.safetensors' SHA-256 in the manifest of every checkpoint an sft writes."""

    def __call__(self, cmd: list[str], log: Path) -> str:
        self.cmds.append(cmd)
        sets = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--set")
        if "sft" in cmd:
            ckpt = Path(sets["launch.run_root"]) / sets["launch.name"] / "checkpoints/step-4"
            ckpt.mkdir(parents=True)
            (ckpt / "manifest.json").write_text(json.dumps({"format": 1, "hash": "sha256", "files": {
                "model.safetensors": {"size": 8, "sha256": self.weights_sha},
                "dcp/__0_0.distcp": {"size": 8, "sha256": "cd" * 32}}}))
            return (f"[sft] 32 demonstrations from oracle: 64 steps\n"
                    f"[sft] 4 steps in 12.5 s; checkpoint {ckpt}\n")
        if "launch" in cmd:
            run = Path(sets["launch.run_root"]) / sets["launch.name"]
            (run / "checkpoints/step-2/dcp").mkdir(parents=True)  # usable without a manifest
            (run / "checkpoints/step-2/learner_state.json").write_text('{"version": 2}')
            (run / "metrics.jsonl").write_text("".join(json.dumps(
                {"update": u, "time": 100.0 * u, "learner/loss": 0.1, "episodes/steps_p50": 90})
                + "\n" for u in (1, 2)))
            return f"[launch] run directory: {run}\n"
        out = Path(cmd[cmd.index("--episodes-out") + 1])
        tasks = int(cmd[cmd.index("--num-tasks") + 1])
        out.write_text("".join(json.dumps({"steps": 3, "metrics": {"success": 1.0,
                                                                     "progress": 0.5}}) + "\n"
                               for _ in range(tasks)))
        return ""


def _recording_rl(started: list[tuple[str, str]], rl_s: float):  # type: ignore[no-untyped-def]
    """bench_sft_vs_rl's `rl` that records each (launch name, start checkpoint) in `started`
    and returns the start as its final checkpoint after 3 updates in `rl_s` seconds."""
    def rl(args, name, seed, ckpt, extra):  # type: ignore[no-untyped-def]
        started.append((name, ckpt))
        return ckpt, {"updates": 3, "rl_s": rl_s}
    return rl


def test_sft_vs_rl_trains_best_sft_again_when_its_checkpoint_is_gone_and_arms_remain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("bench_sft_vs_rl")
    fake = FakeCli()
    started: list[tuple[str, str]] = []
    monkeypatch.setattr(mod, "run_logged", fake)
    monkeypatch.setattr(mod, "rl", _recording_rl(started, rl_s=0.0))
    # this machine's bf16 verdict today; seed 0's record says fp32, and the record wins
    monkeypatch.setattr(mod, "seed_precision",
                        lambda cfg: {"learner_bf16": True, "engine_dtype": "bfloat16"})
    out = tmp_path / "out"
    out.mkdir()
    (out / "best.json").write_text(json.dumps({"demos": 32, "epochs": 2}))
    gone = str(tmp_path / "a-session-ago/checkpoints/step-4")
    first = {"checkpoint": gone, "metric": 0.9, "sft_s": 10.0, "sft_steps": 4}
    older = {"checkpoint": gone + "-older", "metric": 0.5}  # a loss in an earlier session
    (out / "evals").mkdir()
    (out / "evals/best_sft-s0.jsonl").write_text("its rows\n")
    lost0 = {**first, "rows": str(out / "evals/best_sft-s0.jsonl")}
    fp32 = {"learner_bf16": False, "engine_dtype": "float32"}
    (out / "arms.json").write_text(json.dumps({
        "0": {"best_sft": lost0, "best_sft_lost": older,           # rl_step still to run
              "precision": fp32},
        "1": {"best_sft": first, "rl_step": {"metric": 0.8}}}))    # nothing left to run
    args = mod.parser().parse_args(["--config", "configs/default.yaml", "--stage", "arms",
                                    "--out", str(out), "--seeds", "0", "1", "--arms",
                                    "best_sft", "rl_step", "--test-tasks", "5"])
    done = mod.arms(args)
    # seed 0: trained again (its own demonstrations, order and seed), evaluated, then RL
    # started from the new checkpoint; the first record is kept beside it
    [sft_cmd] = [c for c in fake.cmds if "sft" in c]
    assert {"sft.num_demos=32", "sft.epochs=2", "sft.demo_seed=0", "learner.seed=0",
            "launch.name=best-s0", "learner.bf16=false", "engine.dtype=float32"} <= set(sft_cmd)
    assert all({"learner.bf16=false", "engine.dtype=float32"} <= set(c) for c in fake.cmds)
    new = str(out / "runs/best-s0/checkpoints/step-4")
    assert done["0"]["best_sft"]["checkpoint"] == new
    assert (done["0"]["best_sft"]["metric"], done["0"]["best_sft"]["episodes"]) == (1.0, 5)
    # the gone one's rows moved beside the arm's file, which the new evaluation wrote
    kept = str(out / "evals/best_sft_lost2-s0.jsonl")
    assert (done["0"]["best_sft_lost"], done["0"]["best_sft_lost2"]) == (older, {**lost0, "rows": kept})
    assert Path(kept).read_text() == "its rows\n"
    assert done["0"]["best_sft"]["rows"] == str(out / "evals/best_sft-s0.jsonl")
    assert len((out / "evals/best_sft-s0.jsonl").read_text().splitlines()) == 5
    assert started == [("rl_step-s0", new)]
    assert done["0"]["rl_step"]["start"] == new
    # seed 1: every arm done, so its missing checkpoint is left alone
    assert done["1"] == {"best_sft": first, "rl_step": {"metric": 0.8}}
    assert json.loads((out / "arms.json").read_text()) == done


def test_sft_vs_rl_runs_an_arm_again_that_started_from_a_replaced_best_sft(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("bench_sft_vs_rl")
    fake = FakeCli()
    monkeypatch.setattr(mod, "run_logged", fake)
    monkeypatch.setattr(mod, "rl", lambda args, name, seed, ckpt, extra: pytest.fail("no RL"))
    out = tmp_path / "out"
    (out / "evals").mkdir(parents=True)
    (out / "best.json").write_text(json.dumps({"demos": 32, "epochs": 2}))
    now, before = tmp_path / "best-now/checkpoints/step-4", str(tmp_path / "best-before/step-4")
    now.mkdir(parents=True)
    (out / "evals/sft_continued-s0.jsonl").write_text("its rows\n")
    old = {"checkpoint": "c", "start": before, "metric": 0.83,
           "rows": str(out / "evals/sft_continued-s0.jsonl")}
    runs = {"best_sft": {"checkpoint": str(now), "metric": 0.54, "sft_s": 40.0, "sft_steps": 4},
            "best_sft_lost": {"checkpoint": "older", "metric": 0.53},
            "best_sft_lost2": {"checkpoint": before, "metric": 0.73},
            "rl_step": {"start": str(now), "rl_s": 25.0, "metric": 0.72},
            "rl_step_from_lost": {"start": "older", "metric": 0.68},
            "sft_continued": old,
            "precision": {"learner_bf16": True, "engine_dtype": "bfloat16"}}
    (out / "arms.json").write_text(json.dumps({"0": runs}))
    args = mod.parser().parse_args(["--config", "configs/default.yaml", "--stage", "arms",
                                    "--out", str(out), "--seeds", "0", "--arms", "best_sft",
                                    "rl_step", "sft_continued", "--test-tasks", "5"])
    done = mod.arms(args)["0"]
    # sft_continued started from best_sft_lost2's checkpoint: kept under that start's name,
    # its rows beside it, and trained again from today's best SFT for rl_step's 25 s
    kept = str(out / "evals/sft_continued_from_lost2-s0.jsonl")
    assert done["sft_continued_from_lost2"] == {**old, "rows": kept}
    assert Path(kept).read_text() == "its rows\n"
    [cmd] = [c for c in fake.cmds if "sft" in c]
    assert {f"model.init_from={now}", "sft.max_wall_time_s=25", "sft.demo_offset=32",
            "launch.name=sft_continued-s0"} <= set(cmd)
    # 8 demonstrations a batch x ceil(1.5 x 25 s / (40 s / 4 steps)) = 8 x 4
    assert "sft.num_demos=32" in cmd
    assert done["sft_continued"]["start"] == str(now)
    assert (done["sft_continued"]["metric"], done["sft_continued"]["episodes"]) == (1.0, 5)
    # rl_step shares the start and is left; the record already named for its start is too
    assert done["rl_step"] == runs["rl_step"]
    assert done["rl_step_from_lost"] == runs["rl_step_from_lost"]
    assert mod.restart_arms(done, ["best_sft", "rl_step", "sft_continued"], 0) == []


def test_sft_vs_rl_arms_done_from_a_gone_best_sft_run_again_from_its_retraining(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("bench_sft_vs_rl")
    fake = FakeCli()
    fake.weights_sha = "ef" * 32  # not the gone checkpoint's weights: the retrain is evaluated
    started: list[tuple[str, str]] = []
    monkeypatch.setattr(mod, "run_logged", fake)
    monkeypatch.setattr(mod, "rl", _recording_rl(started, rl_s=20.0))
    out = tmp_path / "out"
    out.mkdir()
    (out / "best.json").write_text(json.dumps({"demos": 32, "epochs": 2}))
    gone = str(tmp_path / "a-session-ago/checkpoints/step-4")
    rl_done = {"checkpoint": "r", "start": gone, "rl_s": 30.0, "metric": 0.6}
    (out / "arms.json").write_text(json.dumps({"0": {
        "best_sft": {"checkpoint": gone, "metric": 0.5, "sft_s": 40.0, "sft_steps": 4},
        "rl_step": rl_done, "precision": {"learner_bf16": False, "engine_dtype": "float32"}}}))
    args = mod.parser().parse_args(["--config", "configs/default.yaml", "--stage", "arms",
                                    "--out", str(out), "--seeds", "0", "--arms", "best_sft",
                                    "rl_step", "sft_continued", "--test-tasks", "5"])
    done = mod.arms(args)["0"]
    new = str(out / "runs/best-s0/checkpoints/step-4")
    # sft_continued still to run, so best_sft is trained again; rl_step, done from the gone
    # one, is kept as rl_step_from_lost and runs again, and sft_continued takes the new
    # rl_step's 20 s at the retrain's pace: 8 x ceil(1.5 x 20 / (12.5 / 4)) = 80 demonstrations
    assert done["best_sft"]["checkpoint"] == new and done["best_sft_lost"]["checkpoint"] == gone
    assert done["rl_step_from_lost"] == rl_done
    assert started == [("rl_step-s0", new)] and done["rl_step"]["start"] == new
    [cont] = [c for c in fake.cmds if "sft" in c and "launch.name=sft_continued-s0" in c]
    assert {f"model.init_from={new}", "sft.max_wall_time_s=20", "sft.num_demos=80"} <= set(cont)


def test_sft_vs_rl_weights_digest_covers_the_top_level_safetensors_only(tmp_path: Path) -> None:
    mod = load("bench_sft_vs_rl")
    assert mod.weights_digest(str(tmp_path)) is None  # no manifest
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {
        "model-00002-of-00002.safetensors": {"size": 1, "sha256": "22"},
        "model-00001-of-00002.safetensors": {"size": 1, "sha256": "11"},
        "dcp/x.safetensors": {"size": 1, "sha256": "33"}, "config.json": {"size": 1, "sha256": "44"}}}))
    expected = hashlib.sha256(b"model-00001-of-00002.safetensors 11\n"
                              b"model-00002-of-00002.safetensors 22").hexdigest()
    assert mod.weights_digest(str(tmp_path)) == expected


def test_sft_vs_rl_best_sft_trained_again_to_the_same_weights_keeps_its_evaluation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("bench_sft_vs_rl")
    fake = FakeCli()
    monkeypatch.setattr(mod, "run_logged", fake)
    monkeypatch.setattr(mod, "rl", lambda args, name, seed, ckpt, extra: (ckpt, {"rl_s": 0.0}))
    monkeypatch.setattr(mod, "seed_precision",
                        lambda cfg: {"learner_bf16": True, "engine_dtype": "bfloat16"})
    out = tmp_path / "out"
    out.mkdir()
    (out / "best.json").write_text(json.dumps({"demos": 32, "epochs": 2}))
    same = hashlib.sha256(f"model.safetensors {fake.weights_sha}".encode()).hexdigest()
    first = {"checkpoint": str(tmp_path / "gone/checkpoints/step-4"), "metric": 0.7,
             "sft_s": 10.0, "sft_steps": 4, "weights": same,
             "rows": str(out / "evals/best_sft-s0.jsonl")}
    (out / "evals").mkdir()
    (out / "evals/best_sft-s0.jsonl").write_text("its rows\n")
    (out / "arms.json").write_text(json.dumps({"0": {"best_sft": first}}))
    args = mod.parser().parse_args(["--config", "configs/default.yaml", "--stage", "arms",
                                    "--out", str(out), "--seeds", "0", "--arms",
                                    "best_sft", "rl_step", "--test-tasks", "5"])
    done = mod.arms(args)
    new = str(out / "runs/best-s0/checkpoints/step-4")
    best = done["0"]["best_sft"]
    # no evaluation of the warm start: the only eval is rl_step's; 0.7 stands, not the fake's 1.0
    assert [c[c.index("--model") + 1] for c in fake.cmds if "eval" in c] == [new]
    assert (best["checkpoint"], best["metric"], best["rows"]) == (new, 0.7, first["rows"])
    assert (best["trained_again"]["sft_s"], best["trained_again"]["weights"]) == (12.5, same)
    assert not any(k.startswith("best_sft_lost") for k in done["0"])
    # its rows went to best_sft_lost-s0.jsonl while it was gone, and back under its own name
    assert (out / "evals/best_sft-s0.jsonl").read_text() == "its rows\n"
    assert not (out / "evals/best_sft_lost-s0.jsonl").exists()
    assert done["0"]["rl_step"]["start"] == new


def test_context_builders_runs_each_builders_cell_through_the_arms_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    mod = load("bench_context_builders")
    fake = FakeCli()
    monkeypatch.setattr(mod.sft_vs_rl, "run_logged", fake)
    monkeypatch.setattr(mod.sft_vs_rl, "seed_precision",
                        lambda cfg: {"learner_bf16": True, "engine_dtype": "bfloat16"})
    args = argparse.Namespace(config=mod.ROOT / "configs/world.yaml", overrides=["sft.batch_episodes=4"],
                              out=tmp_path, seeds=[1], demos=16, epochs=2, budget_s=60.0, updates=2,
                              test_tasks=3, metric="progress", horizon_bins=[10, 20])
    mod.run(args)
    evals = [c for c in fake.cmds if "eval" in c]
    assert len(evals) == 3 * 2  # best_sft and rl_step per builder
    for builder, keys in mod.BUILDERS.items():
        done = json.loads((tmp_path / builder / "arms.json").read_text())
        assert list(done) == ["1"] and sorted(done["1"]) == ["best_sft", "precision", "rl_step"]
        # a new seed records the precision this machine resolves, and every command runs at it
        assert done["1"]["precision"] == {"learner_bf16": True, "engine_dtype": "bfloat16"}
        assert all({"learner.bf16=true", "engine.dtype=bfloat16"} <= set(c) for c in fake.cmds)
        assert done["1"]["rl_step"]["metric"] == 0.5  # progress, the bench's metric
        launch = next(c for c in fake.cmds if "launch" in c and f"launch.run_root={tmp_path / builder}/runs" in c)
        assert (done["1"]["rl_step"]["updates"], done["1"]["rl_step"]["rl_s"]) == (2, 100.0)
        # the same RL on any machine: 2 updates of one group of 4, the wall clock a cap
        assert {"learner.total_updates=2", "launch.max_wall_time_s=60.0",
                "algorithm.group_size=4", "algorithm.batch_groups=1"} <= set(launch)
        assert json.loads((tmp_path / builder / "best.json").read_text()) == {
            "demos": 16, "epochs": 2, "pinned": True}
        ev = next(c for c in evals if f"{builder}/evals/rl_step-s1.jsonl" in " ".join(c))
        assert {*mod.WINDOW, *keys, "sft.batch_episodes=4", "launch.seed=1"} <= set(ev)
        assert ev[ev.index("--num-tasks") + 1] == "3" and ev[ev.index("--split") + 1] == "test"


class CoinHouse:
    """A four-room house for `shortest_route`: A (start) east to B, north to D; B east to C,
    north to D; D east to B; the coin in C. Each room's observation is its name."""

    EXITS: ClassVar[dict[str, dict[str, str]]] = {
             "A": {"move east": "B", "move north": "D"},
             "B": {"move west": "A", "move east": "C", "move north": "D"},
             "C": {"move west": "B"}, "D": {"move south": "A", "move east": "B"}}

    def __init__(self) -> None:
        self.room, self.steps = "A", 0

    def _frame(self, won: bool = False):  # type: ignore[no-untyped-def]
        from agent_r1_async.envs.twx.game import Frame

        extra = ("take coin",) if self.room == "C" else ()
        return Frame(self.room, float(won), won, False,
                     tuple(sorted([*self.EXITS[self.room], "look around", "inventory", *extra])))

    def start(self, gid, gold=False):  # type: ignore[no-untyped-def]
        self.room = "A"
        return self._frame()

    def step(self, command):  # type: ignore[no-untyped-def]
        self.steps += 1
        if command == "take coin":
            return self._frame(won=True)
        self.room = self.EXITS[self.room].get(command, self.room)
        return self._frame()


def test_twx_gold_paths_shortest_route_is_breadth_first_and_skips_passive_commands() -> None:
    mod = load("bench_twx_gold_paths")
    house = CoinHouse()
    assert mod.shortest_route(house, None) == ("move east", "move east", "take coin")
    # by hand, level by level, passive commands never tried: A's east (B, new) and north (D,
    # new); B's east (C, new), north (D, seen), west (A, seen); D's east and south (seen); C's
    # west (seen) and take coin (won): 9 commands, each after its prefix replayed from the
    # start: 0 + 0 + 1 + 1 + 1 + 1 + 1 + 2 + 2 = 9 replayed steps
    assert house.steps == 9 + 9
    with pytest.raises(ValueError, match="within 3 commands"):
        mod.shortest_route(CoinHouse(), None, max_expansions=3)

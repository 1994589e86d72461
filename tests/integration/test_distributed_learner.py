"""The FSDP2 learner at world_size 2 (gloo, CPU) against the single-process learner.

One `torch.multiprocessing` spawn of 2 ranks (real torch.distributed: gloo over 127.0.0.1, a
free port) runs every scenario; each rank writes what it saw to a file, and the tests compare
with single-process runs in this process on the same batches (same FakeSource seed):

- one update per algorithm variant: the parameters equal the single-process update's to
  1e-5 (fp32). Variants cover step packing on and off, the skipped and the separate proximal
  pass, PPO (value head in the FSDP root, V(s_t) all-reduced for GAE), seq-mean-token-sum
  with a sharded reference model (KL) and entropy, and steps of advantage 0 left out
  (`learner.skip_zero_advantage`; the other GRPO variants compute every step). The 64-token
  micro-batch budget gives the ranks different numbers of rows and of micro-batches
  (zero-weight fillers run);
- checkpoints: 2 updates at world_size 2, a DCP checkpoint, a 3rd update at world_size 1
  equals the uninterrupted 2-rank run's 3rd; and 1 → 2: a checkpoint written here by one
  process, resumed by 2 ranks;
- an update whose episodes are sampled (`logging.episodes_every`): rank 0's sample, with each
  step's importance weights gathered from both ranks, and the importance-weight histogram
  equal the single process's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from agent_r1_async import config
from agent_r1_async.learner import distributed
from agent_r1_async.learner.loop import Learner
from agent_r1_async.models import tiny_model_dir
from tests.fakes.learner import FakeSource

VOCAB = 49152
WORLD = 2
SEED = 6
"""A batch whose token-balanced split is uneven in rows (4 / 5 packed) and in micro-batches
(2 / 1: rank 1 runs a filler)."""
VARIANTS = {
    "grpo-packed": ({}, {"pack_steps": True, "ppo_epochs": 1, "skip_zero_advantage": False}),
    "grpo-unpacked": ({}, {"pack_steps": False, "ppo_epochs": 2, "skip_zero_advantage": False}),
    "grpo-skip": ({}, {"pack_steps": True, "ppo_epochs": 1}),
    "ppo": ({"name": "ppo", "gamma": 0.9}, {"ppo_epochs": 2}),
    "rloo-kl-seqmean": ({"name": "rloo", "credit": "token", "loss_agg": "seq-mean-token-sum",
                         "kl_coef": 0.1, "entropy_coef": 0.01}, {"ppo_epochs": 1}),
}


def _cfg(algo: dict, learner: dict, logging: dict | None = None) -> config.RunConfig:
    return config.config_from_dict({
        "model": {"name_or_path": tiny_model_dir()},
        "algorithm": {"group_size": 2, "batch_groups": 3, **algo},
        "learner": {"lr": 1e-3, "micro_batch_tokens": 64, "device": "cpu", "seed": 0,
                    "bf16": False, **learner},
        "logging": logging or {},
    })


SAMPLED = {"episodes_every": 1, "episodes_groups": 3}


def _source(seed: int, skip: int = 0) -> FakeSource:
    """Batches k = skip, skip + 1, ... of the seed's stream (versions follow the learner's)."""
    src = FakeSource(VOCAB, group_size=2, seed=seed)
    for v in range(skip):
        src.sample(3, v, 0.0)
    return src


def _params(learner: Learner) -> dict[str, torch.Tensor]:
    return learner.trainer.published_state_dict()  # gathered: full tensors on rank 0


def _worker(rank: int, port: int, out: str, ws1_ckpt: str) -> None:
    torch.set_num_threads(1)
    distributed.init_group(rank, WORLD, "127.0.0.1", port, "gloo", timeout_s=120)
    try:
        result: dict = {}
        for name, (algo, lc) in VARIANTS.items():
            learner = Learner(_cfg(algo, lc), _source(SEED) if rank == 0 else None, None, None)
            m = learner.update()
            share = learner._prepare(_source(SEED).sample(3, 0, 0.0))[1]
            result[name] = {"params": _params(learner), "metrics": m,
                            "rows": sum(mb.steps for mb in share),
                            "tokens": sum(mb.num_tokens for mb in share),
                            "micro_batches": len(share)}
        sampled = Learner(_cfg(*VARIANTS["grpo-packed"], SAMPLED),
                          _source(SEED) if rank == 0 else None, None, None)
        sampled.update()
        result["episodes"] = sampled.last_episodes
        result["is_weight_hist"] = sampled.last_is_weight_hist
        cfg = _cfg(*VARIANTS["grpo-packed"])
        straight = Learner(cfg, _source(2) if rank == 0 else None, None, None)
        for _ in range(3):
            straight.update()
        result["straight3"] = _params(straight)
        saver = Learner(cfg, _source(2) if rank == 0 else None, None, f"{out}/run-ws2")
        for _ in range(2):
            saver.update()
        result["ckpt_ws2"] = saver.save_checkpoint()
        resumed = Learner.from_checkpoint(cfg, _source(3, skip=2) if rank == 0 else None,
                                          None, ws1_ckpt)
        resumed.update()
        result["resumed_from_ws1"] = _params(resumed)
        torch.save(result, f"{out}/rank-{rank}.pt")
    finally:
        distributed.destroy_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[list[dict], Path]:
    out = tmp_path_factory.mktemp("dist")
    # 1 → 2: a single-process run writes 2 updates; the ranks resume it.
    cfg = _cfg(*VARIANTS["grpo-packed"])
    ws1 = Learner(cfg, _source(3), None, str(out / "run-ws1"))
    for _ in range(2):
        ws1.update()
    ws1.save_checkpoint()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(distributed.free_port(), str(out), str(out / "run-ws1")),
             nprocs=WORLD, join=True)
    return [torch.load(out / f"rank-{r}.pt", weights_only=False) for r in range(WORLD)], out


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=0, msg=k)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_one_update_equals_the_single_process_update(ranks, name):
    results, _ = ranks
    algo, lc = VARIANTS[name]
    single = Learner(_cfg(algo, lc), _source(SEED), None, None)
    before = {k: v.clone() for k, v in _params(single).items()}
    m = single.update()
    want = _params(single)
    r0, r1 = results[0][name], results[1][name]
    assert r1["params"] == {}  # only rank 0 receives the gathered weights
    _assert_same(r0["params"], want)
    # The update moved the weights far beyond the tolerance (lr 1e-3 with Adam: ~1e-3).
    assert max(float((want[k] - before[k]).abs().max()) for k in want) > 5e-4
    # Metrics are global: summed over the ranks' shares.
    assert r0["metrics"]["action_tokens"] == m["action_tokens"]
    assert r0["metrics"]["loss"] == pytest.approx(m["loss"], abs=1e-5)
    assert r0["metrics"]["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-4)
    # Balanced by tokens, not rows: the shares' token counts are close and both ranks trained.
    assert r0["rows"] + r1["rows"] == m["rows_trained"] and r0["rows"] > 0 and r1["rows"] > 0
    skips = lc.get("skip_zero_advantage", True) and algo.get("name", "grpo") == "grpo"
    assert (m["rows_trained"] < m["rows"]) is skips
    assert r0["metrics"]["rows_trained"] == m["rows_trained"]
    assert r0["metrics"]["load_imbalance"] == pytest.approx(
        max(r0["tokens"], r1["tokens"]) / ((r0["tokens"] + r1["tokens"]) / 2))


def test_the_shares_differ_in_rows_and_micro_batches(ranks):
    """What makes the equivalence above non-trivial: uneven rows and micro-batches per rank
    (rank 1 runs a zero-weight filler), with near-equal tokens."""
    results, _ = ranks
    packed = [(r["grpo-packed"]["rows"], r["grpo-packed"]["micro_batches"]) for r in results]
    assert packed == [(4, 2), (5, 1)]
    assert [r["grpo-packed"]["tokens"] for r in results] == [56, 60]
    unpacked = [r["grpo-unpacked"]["rows"] for r in results]
    assert unpacked == [4, 5]  # learner.shared_prefix: `balance` places whole prefix trees


def test_checkpoint_from_2_ranks_resumes_in_1_process(ranks):
    results, out = ranks
    ckpt = results[0]["ckpt_ws2"]
    assert ckpt == results[1]["ckpt_ws2"] and Path(ckpt).name == "step-2"
    root = Path(ckpt).parent
    assert sorted(os.listdir(root)) == ["latest", "step-2"]  # no temp dirs left
    assert sorted(os.listdir(Path(ckpt) / "rng")) == ["rank-0.pt", "rank-1.pt"]
    cfg = _cfg(*VARIANTS["grpo-packed"])
    resumed = Learner.from_checkpoint(cfg, _source(2, skip=2), None, str(out / "run-ws2"))
    assert (resumed.version, resumed.updates) == (2, 2)
    resumed.update()
    _assert_same(_params(resumed), results[0]["straight3"])


def test_checkpoint_from_1_process_resumes_in_2_ranks(ranks):
    results, _ = ranks
    cfg = _cfg(*VARIANTS["grpo-packed"])
    straight = Learner(cfg, _source(3), None, None)
    for _ in range(3):
        straight.update()
    _assert_same(results[0]["resumed_from_ws1"], _params(straight))


def test_a_sampled_update_shows_the_same_episodes_and_weights_as_one_process(ranks):
    results, _ = ranks
    single = Learner(_cfg(*VARIANTS["grpo-packed"], SAMPLED), _source(SEED), None, None)
    single.update()
    want, got = single.last_episodes, results[0]["episodes"]
    assert results[1]["episodes"] == []  # rank 0 alone decodes
    assert len(got) == len(want) > 0
    steps = {(r["episode_id"], r["step"]) for r in want}
    assert {(r["episode_id"], r["step"]) for r in got} == steps
    for g, w in zip(got, want, strict=True):
        assert (g["action"], g["versions"], g["pick"]) == (w["action"], w["versions"], w["pick"])
        for key in ("is_weight_mean", "is_weight_max", "is_weight_min"):
            assert g[key] is not None and g[key] == pytest.approx(w[key], rel=1e-4), key
    hist = results[0]["is_weight_hist"]
    assert hist == results[1]["is_weight_hist"]  # summed over the ranks
    assert hist["counts"] == pytest.approx(single.last_is_weight_hist["counts"])


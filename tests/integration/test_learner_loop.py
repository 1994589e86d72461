"""The learner on the tiny model: a few updates from synthetic step records, real ZMQ weights.

The fake source returns groups of 1-2-step episodes with random (valid) token ids; episode 0
of each group wins, so GRPO advantages are non-zero. Behavior log-probs are −3 (≈ what any
policy gives random tokens would be unrelated), so importance weights exercise truncation.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from agent_r1_async import config
from agent_r1_async.learner.loop import Learner
from agent_r1_async.learner.weights import WeightPublisher, WeightReceiver
from agent_r1_async.models import tiny_model_dir
from agent_r1_async.transport import ZmqTransport
from tests.fakes_learner import FakeSource

VOCAB = 49152


def _cfg(**algo) -> config.RunConfig:
    return config.config_from_dict({
        "model": {"name_or_path": tiny_model_dir()},
        "algorithm": {"group_size": 2, "batch_groups": 2, **algo},
        "learner": {"lr": 1e-3, "micro_batch_tokens": 64, "ppo_epochs": 2, "device": "cpu",
                    "checkpoint_every": 2},
    })


@pytest.fixture
def transport():
    t = ZmqTransport()
    yield t
    t.close()


def _receive(sub: WeightReceiver, version: int, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = sub.poll(timeout_ms=200)
        if got is not None and got[0].version == version:
            return got
    raise AssertionError(f"version {version} never arrived")


def test_updates_publish_identical_weights_and_resume(tmp_path, transport):
    cfg = _cfg()
    pub = WeightPublisher(transport)
    sub = WeightReceiver(transport, pub.endpoint)
    source = FakeSource(VOCAB, group_size=2, not_ready_first=1)
    try:
        time.sleep(0.3)  # PUB/SUB: let the subscription reach the publisher first
        learner = Learner(cfg, transport, source, pub, str(tmp_path))
        before = {k: v.clone() for k, v in learner.trainer.published_state_dict().items()}
        metrics = [learner.update() for _ in range(2)]
        assert learner.version == 2 and source.versions_set == [1, 2]
        for m in metrics:
            assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])
            assert m["grad_norm"] > 0 and m["micro_batches"] > 1  # 64-token budget splits it
        # Data is one version stale after the first update (FakeSource stamps version − 1).
        assert metrics[0]["staleness_max"] == 0 and metrics[1]["staleness_mean"] == 1.0
        # Behavior log-probs −3 vs the tiny model's ≈ −ln(49152) ≈ −10.8: w = e^−7.8, tiny.
        assert metrics[0]["is_weight_mean"] < 0.01 and metrics[0]["mismatch_kl"] > 1
        header, got = _receive(sub, 2)
        mine = learner.trainer.published_state_dict()
        assert list(got) == list(mine)
        assert all(torch.equal(got[k], mine[k]) for k in mine)  # bit for bit
        assert any(not torch.equal(before[k], mine[k]) for k in mine)  # training moved them

        ckpt = learner.save_checkpoint()
        assert ckpt.endswith("step-2") and (tmp_path / "checkpoints" / "latest").is_symlink()
        resumed = Learner.from_checkpoint(cfg, transport, source, pub, str(tmp_path))
        assert resumed.version == 2 and resumed.updates == 2 and resumed.samples_drawn == 2
        res = resumed.trainer.published_state_dict()
        assert all(torch.equal(res[k], mine[k]) for k in mine)
        # Optimizer moments survive the restart.
        s0 = learner.trainer.optimizer.state_dict()["state"]
        s1 = resumed.trainer.optimizer.state_dict()["state"]
        assert all(torch.equal(s0[i]["exp_avg"], s1[i]["exp_avg"]) for i in s0)
        resumed.update()
        assert resumed.version == 3 and source.versions_set[-1] == 3
        assert _receive(sub, 3)[0].version == 3
    finally:
        sub.close()
        pub.close()


@pytest.mark.parametrize("algo", [
    {"name": "ppo", "gamma": 0.9},
    {"name": "rloo", "credit": "token", "loss_agg": "seq-mean-token-sum"},
    {"name": "reinforce_pp", "kl_coef": 0.1, "entropy_coef": 0.01, "is_mask_high": 2.0},
])
def test_other_algorithms_run(algo):
    cfg = _cfg(**algo)
    learner = Learner(cfg, None, FakeSource(VOCAB, group_size=2), None, None)
    m = learner.update()
    assert math.isfinite(m["loss"]) and learner.version == 1
    if algo["name"] == "ppo":
        assert math.isfinite(m["value_loss"]) and m["value_loss"] > 0
    if "kl_coef" in algo:
        assert m["kl_ref"] >= 0 and m["entropy"] > 0
        assert m["masked_frac"] == 0.0  # w ≪ 1 here, none above 2

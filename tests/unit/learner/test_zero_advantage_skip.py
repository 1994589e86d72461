"""Steps of advantage exactly 0 left out of the learner's forward and backward
(`learner.skip_zero_advantage`, learner/loop.py `skips_zero_advantage`): the same loss,
gradient and weights as computing them, for less compute, on a tiny random Llama.

The bound is test_shared_prefix.py's: the two sides compute the same sums in other
micro-batches (a left-out step's terms are exact zeros), so each tensor agrees within
1e-5 of its scale.
"""

from __future__ import annotations

import random

import msgspec
import pytest
import torch

from agent_r1_async import config
from agent_r1_async.learner import batching
from agent_r1_async.learner.loop import Learner, skips_zero_advantage
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.wire import messages
from tests.fakes.records import sample_batch, synthetic_batch
from tests.unit.learner.test_shared_prefix import (  # noqa: F401  (model_dir: a fixture)
    VOCAB,
    _case,
    _cfg,
    _close,
    _trainer,
    model_dir,
)


def _grads(tr: PolicyTrainer) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in tr.net.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "unpacked"])
def test_left_out_steps_change_neither_the_loss_nor_the_gradient(model_dir, pack):  # noqa: F811
    """Group 1 all zero, and in group 0 every episode's last step: group 0's episodes of two
    or more steps end one step earlier (packed), its one-step episodes and group 1 go."""
    rows, budget = _case("groups")
    for r in rows:
        last = max(q.step_index for q in rows
                   if (q.group_index, q.episode_index) == (r.group_index, r.episode_index))
        if r.group_index == 1 or r.step_index == last:
            r.advantage = 0.0
    seqs = batching.training_sequences(rows, pack)
    kept = batching.trained_sequences(rows, seqs)
    # By hand: the flat tokens of what is trained. Packed, an episode of n ≥ 2 steps is one
    # sequence up to step n − 2 (its context + action); unpacked, each nonzero step alone.
    trained = [r for r in rows if r.advantage != 0.0]
    if pack:
        ends = {}
        for r in trained:
            ends[(r.group_index, r.episode_index)] = r.length
        want_tokens = sum(ends.values())
    else:
        want_tokens = sum(r.length for r in trained)
    assert trained and len(trained) < len(rows)

    cfg = _cfg(model_dir)
    full_tr, skip_tr = _trainer(cfg, model_dir), _trainer(cfg, model_dir)
    full = batching.sequences_to_micro_batches(rows, seqs, budget, full_tr.pad_id)
    skip = batching.sequences_to_micro_batches(rows, kept, budget, skip_tr.pad_id)
    assert sum(mb.flat_tokens for mb in skip) == want_tokens
    assert want_tokens < sum(mb.flat_tokens for mb in full)
    m_full = full_tr.optimize(full, 0)
    m_skip = skip_tr.optimize(skip, 0, batching.batch_counts(rows))
    _close(m_skip["loss"], m_full["loss"], "loss")
    assert m_full["loss"] != 0.0
    g_full, g_skip = _grads(full_tr), _grads(skip_tr)
    assert set(g_skip) == set(g_full)
    for name, g in g_full.items():
        _close(g_skip[name], g, f"gradient of {name}")
    # Without the whole batch's counts the denominator would be the trained tokens alone:
    # a larger loss, by (all action tokens) / (trained action tokens).
    ratio = sum(len(r.action_ids) for r in rows) / sum(
        len(rows[i].action_ids) for s in kept for i in s)
    other = _trainer(cfg, model_dir)
    m_own = other.optimize(batching.sequences_to_micro_batches(rows, kept, budget, other.pad_id), 0)
    _close(m_own["loss"], m_full["loss"] * ratio, "loss over the trained tokens alone")


class _Batches:
    """A sample source that hands out `batches` in order."""

    def __init__(self, batches: list[messages.SampleBatch]) -> None:
        self.batches = batches

    def sample(self, num_groups: int, learner_version: int, timeout_s: float,
               failed_episodes: int = 0) -> messages.SampleBatch:
        b = self.batches.pop(0)
        return messages.SampleBatch(b.groups, b.is_weights, learner_version)

    def set_version(self, version: int) -> None:
        pass


def _batch(seed: int, outcomes: list[list[float]]) -> messages.SampleBatch:
    """`synthetic_batch`'s groups (1-2 steps an episode, 0.1 of process reward at step 0)
    with the given outcome per episode."""
    b = synthetic_batch(random.Random(seed), len(outcomes), len(outcomes[0]), VOCAB, version=0)
    return sample_batch([
        [msgspec.structs.replace(ep, end=msgspec.structs.replace(ep.end, outcome_reward=r))
         for ep, r in zip(g.episodes, rs, strict=True)]
        for g, rs in zip(b.groups, outcomes, strict=True)])


def _learner(path: str, skip: bool, batches: list[messages.SampleBatch]) -> Learner:
    cfg = config.config_from_dict({
        "model": {"name_or_path": path, "max_model_len": 512},
        "algorithm": {"name": "grpo", "group_size": 3, "batch_groups": 2},
        "learner": {"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 0.0, "bf16": False,
                    "device": "cpu", "seed": 0, "skip_zero_advantage": skip},
        "logging": {"episodes_every": 1, "episodes_groups": 2},
    })
    torch.manual_seed(0)
    return Learner(cfg, _Batches(batches), None, None, trainer=PolicyTrainer(cfg, path))


def test_updates_that_skip_give_the_weights_of_updates_that_compute(model_dir):  # noqa: F811
    """Update 1: group 0 mixed (outcomes 1, 0, 0), group 1 all 1 (zero). Update 2: every
    outcome 1, nothing to compute; AdamW still steps (momentum, weight decay) on zero grads."""
    def batches() -> list[messages.SampleBatch]:
        return [_batch(1, [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]), _batch(2, [[1.0] * 3] * 2)]

    skip, full = _learner(model_dir, True, batches()), _learner(model_dir, False, batches())
    assert [[len(ep.steps) for ep in g.episodes] for b in batches() for g in b.groups] \
        == [[2, 1, 2], [1, 2, 2], [1, 2, 2], [1, 1, 1]]
    start = [p.detach().clone() for p in skip.trainer.trainable_parameters()]
    m_skip, m_full = skip.update(), full.update()
    # Returns (γ = 1, 0.1 of process reward at step 0): group 0's step 0 1.1, 0.1, 0.1 and
    # step 1 (episodes 0 and 2) 1, 0: its 5 steps all carry a gradient. Group 1's step 0
    # 1.1 × 3 and step 1 1 × 2: its 5 steps are zero and are left out.
    assert (m_full["rows"], m_full["zero_advantage_frac"], m_full["rows_trained"]) == (10, 0.5, 10)
    assert (m_skip["rows"], m_skip["zero_advantage_frac"], m_skip["rows_trained"]) == (10, 0.5, 5)
    assert m_skip["tokens_flat"] < m_full["tokens_flat"]
    # The episode sample shows every step; a left-out one with advantage 0 and no weight.
    shown = [(r["group_id"], r["advantage"] == 0.0, r["is_weight_mean"] is None)
             for r in skip.last_episodes]
    assert {g for g, _, _ in shown} == {"g0", "g1"}
    assert all((zero, unweighed) == ((g == "g1"),) * 2 for g, zero, unweighed in shown)
    after_1 = [p.detach().clone() for p in skip.trainer.trainable_parameters()]
    m_skip, m_full = skip.update(), full.update()
    assert (m_skip["rows"], m_skip["zero_advantage_frac"], m_skip["rows_trained"],
            m_skip["micro_batches"], m_skip["tokens_flat"], m_skip["load_imbalance"]) \
        == (8, 1.0, 0, 0, 0, 1.0)
    assert m_full["rows_trained"] > 0 and m_full["grad_norm"] == 0.0 == m_skip["grad_norm"]
    for name, a, b, s, p1 in zip(
            [n for n, p in skip.trainer.net.named_parameters() if p.requires_grad],
            skip.trainer.trainable_parameters(), full.trainer.trainable_parameters(), start,
            after_1, strict=True):
        _close(a.detach(), b.detach(), f"{name} after two updates")
        assert not torch.equal(a, p1), f"{name}: the zero-gradient step did not move it"
        assert not torch.equal(p1, s), f"{name}: update 1 did not move it"


@pytest.mark.parametrize("setting, skips", [
    ([], True), (["learner.skip_zero_advantage=false"], False),
    (["algorithm.kl_coef=0.01"], False), (["algorithm.entropy_coef=0.001"], False),
    (["algorithm.name=ppo"], False), (["algorithm.name=rloo"], True),
    (["algorithm.name=reinforce_pp"], True),
])
def test_steps_are_skipped_only_where_their_gradient_is_exactly_zero(setting, skips):
    assert skips_zero_advantage(config.config_from_dict({}, setting)) is skips

"""SFT with `learner.pack_steps`: a demonstration's chained steps share one sequence, with the
loss and gradient of the separate rows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.models import load_tokenizer
from agent_r1_async.sft.demos import DemoStats
from agent_r1_async.sft.train import (
    chain_pairs,
    demo_pairs,
    demo_tasks,
    fit,
    load_demos,
    sft_micro_batches,
    trainer_config,
)
from tests.unit.sft.tiny import loss_and_grads, tiny_sft_config


def test_chain_pairs_joins_only_contexts_that_extend_the_previous_pair() -> None:
    pairs = [([1, 2], [3]), ([1, 2, 3, 4], [5]), ([1, 2, 3, 4, 5, 6], [7]),  # one chain
             ([1, 2], [3]),  # a new demonstration: shorter than the chain
             ([1, 2, 9], [4]),  # keeps the context, not the action: new sequence
             ([1, 2, 9, 4], [8])]
    assert chain_pairs(pairs) == [[0, 1, 2], [3], [4, 5]]


def test_packed_demonstrations_give_the_unpacked_loss_and_gradient(tmp_path: Path) -> None:
    cfg = tiny_sft_config(tmp_path)
    path = cfg.model.name_or_path
    demos = load_demos(cfg, load_tokenizer(path), DemoStats())
    assert [len(d.steps) for d in demos] == [2, 2, 2]
    pairs = demo_pairs(demos)
    torch.manual_seed(0)
    trainer = PolicyTrainer(trainer_config(cfg), path)
    whole = sft_micro_batches(pairs, 4096, trainer.pad_id)
    packed = sft_micro_batches(pairs, 4096, trainer.pad_id, pack=True)
    # By hand: each demonstration's step 1 extends its step 0 → 3 sequences of the step-1
    # length, instead of 6 rows.
    assert sum(int(mb.input_ids.shape[0]) for mb in packed) == 3
    assert sum(mb.steps for mb in packed) == 6
    real = sum(int(mb.attention_mask.sum()) for mb in packed)
    assert real == sum(len(d.steps[1].context_ids) + len(d.steps[1].action_ids) for d in demos)
    assert sum(mb.num_action_tokens for mb in packed) == sum(mb.num_action_tokens for mb in whole)
    loss_w, grads_w = loss_and_grads(trainer, whole)
    loss_p, grads_p = loss_and_grads(trainer, packed)
    assert loss_p == pytest.approx(loss_w, abs=1e-5)
    for gw, gp in zip(grads_w, grads_p, strict=True):
        torch.testing.assert_close(gp, gw, rtol=0, atol=1e-5)


def test_demo_tasks_are_the_split_order_or_a_seeded_sample_with_an_offset() -> None:
    tasks = list(range(10))
    assert demo_tasks(tasks, -1, 0) == tasks and demo_tasks(tasks, -1, 7) == [7, 8, 9]
    a, b = demo_tasks(tasks, 3, 0), demo_tasks(tasks, 4, 0)
    assert sorted(a) == tasks and a != tasks and a != b
    assert demo_tasks(tasks, 3, 4) == a[4:]  # fresh: disjoint from the first 4 of that order
    assert demo_tasks(tasks, 3, 0) == a  # the same seed, the same sample and order


def test_fit_stops_after_the_step_that_reaches_its_wall_time(monkeypatch) -> None:
    import agent_r1_async.sft.train as train

    now = [0.0]

    def step_of_10_s(trainer, mbs):  # every step takes 10 s of a fake clock
        now[0] += 10.0
        return {"loss": 1.0, "tokens": 1.0}

    monkeypatch.setattr(train.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(train, "sft_step", step_of_10_s)
    trainer = SimpleNamespace(
        optimizer=SimpleNamespace(param_groups=[{"lr": 1.0}]), pad_id=0,
        lcfg=SimpleNamespace(micro_batch_tokens=64, pack_steps=False),
        shared_prefix=False, attention_cost=0.0)
    demo = SimpleNamespace(steps=[SimpleNamespace(context_ids=[1], action_ids=[2])])
    # 10 demos, 1 per step, 3 epochs = 30 steps; a 25 s budget stops after step 3 (at 30 s).
    history = fit(trainer, [demo] * 10, 3, 1, max_wall_time_s=25.0)  # type: ignore[arg-type]
    assert len(history) == 3 and history[-1]["step"] == 3 and history[-1]["total_steps"] == 30

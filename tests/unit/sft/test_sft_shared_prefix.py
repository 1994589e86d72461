"""SFT with `learner.shared_prefix`: demonstrations of different tasks share the env's system
prompt, which a batch's prefix tree computes once, with the flat rows' loss and gradient."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.models import load_tokenizer
from agent_r1_async.sft.demos import DemoStats
from agent_r1_async.sft.train import demo_pairs, load_demos, sft_micro_batches, trainer_config
from tests.unit.sft.tiny import loss_and_grads, tiny_sft_config


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "unpacked"])
def test_demonstrations_share_their_system_prompt_with_the_flat_loss_and_gradient(
        tmp_path: Path, pack: bool) -> None:
    cfg = tiny_sft_config(tmp_path)
    path = cfg.model.name_or_path
    pairs = demo_pairs(load_demos(cfg, load_tokenizer(path), DemoStats()))
    torch.manual_seed(0)
    trainer = PolicyTrainer(trainer_config(cfg), path)
    assert trainer.shared_prefix
    flat = sft_micro_batches(pairs, 4096, trainer.pad_id, pack=pack)
    tree = sft_micro_batches(pairs, 4096, trainer.pad_id, pack=pack, shared_prefix=True)
    assert [mb.tree for mb in flat] == [None] and tree[0].tree is not None
    # The three tasks' prompts share the system prompt (with its tool schema): computed once.
    flat_tokens = sum(mb.flat_tokens for mb in flat)
    assert sum(mb.flat_tokens for mb in tree) == flat_tokens
    assert sum(mb.computed_tokens for mb in tree) < 0.6 * flat_tokens
    loss_f, grads_f = loss_and_grads(trainer, flat)
    loss_t, grads_t = loss_and_grads(trainer, tree)
    assert loss_t == pytest.approx(loss_f, abs=1e-5)
    for gf, gt in zip(grads_f, grads_t, strict=True):
        scale = max(1.0, float(gf.abs().max()))  # tests/unit/learner/test_shared_prefix.py
        assert float((gt - gf).abs().max()) <= 1e-5 * scale

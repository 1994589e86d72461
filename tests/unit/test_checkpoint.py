"""Checkpoints: atomic step dirs, the `latest` symlink, full trainer state round trip."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from agent_r1_async import config
from agent_r1_async.learner import checkpoint
from agent_r1_async.learner.trainer import PolicyTrainer


@pytest.fixture(scope="module")
def micro_model_dir(tmp_path_factory) -> str:
    """A 2-layer Llama with hidden 16 and a 64-token vocabulary (no tokenizer)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("micro")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return str(out)


def _trainer(path: str, algo: str = "ppo") -> PolicyTrainer:
    cfg = config.config_from_dict({
        "model": {"name_or_path": path},
        "algorithm": {"name": algo, "group_size": 2},
        "learner": {"device": "cpu", "lr": 1e-2},
    })
    return PolicyTrainer(cfg, path)


def _take_a_step(trainer: PolicyTrainer) -> None:
    for p in trainer.trainable_parameters():
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()


def test_save_load_roundtrip_and_latest_pointer(tmp_path, micro_model_dir):
    trainer = _trainer(micro_model_dir)
    _take_a_step(trainer)
    first = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    _take_a_step(trainer)
    random.seed(123)
    np.random.seed(7)
    torch.manual_seed(5)
    second = checkpoint.save_checkpoint(str(tmp_path), trainer,
                                        {"version": 2, "updates": 2, "samples_drawn": 4})
    expected_draws = (random.random(), np.random.rand(), torch.rand(1))
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["latest", "step-1", "step-2"]  # no temp dirs left
    assert os.readlink(root / "latest") == "step-2"
    assert checkpoint.latest_checkpoint(str(tmp_path)) == second != first
    assert json.loads((root / "step-2" / "learner_state.json").read_text())["samples_drawn"] == 4
    assert (root / "step-2" / "config.yaml").is_file()

    # A fresh trainer built from the checkpoint's HF weights + its DCP state is identical.
    restored = _trainer(second)
    state = checkpoint.load_trainer_state(second, restored)
    assert state["version"] == 2 and state["updates"] == 2
    mine, theirs = trainer.published_state_dict(), restored.published_state_dict()
    assert list(mine) == list(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert torch.equal(trainer.value_head.weight, restored.value_head.weight)
    a, b = trainer.optimizer.state_dict(), restored.optimizer.state_dict()
    assert all(torch.equal(a["state"][i]["exp_avg_sq"], b["state"][i]["exp_avg_sq"]) for i in a["state"])
    # RNG streams continue where the save left them.
    assert (random.random(), np.random.rand()) == expected_draws[:2]
    assert torch.equal(torch.rand(1), expected_draws[2])


def test_resaving_a_step_replaces_it(tmp_path, micro_model_dir):
    trainer = _trainer(micro_model_dir, algo="grpo")
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 3, "updates": 3})
    path = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 4, "updates": 3})
    assert json.loads((Path(path) / "learner_state.json").read_text())["version"] == 4


def test_missing_checkpoint_errors(tmp_path, micro_model_dir):
    assert checkpoint.latest_checkpoint(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="not a learner checkpoint"):
        checkpoint.load_trainer_state(micro_model_dir, _trainer(micro_model_dir))

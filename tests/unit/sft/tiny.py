"""The SFT exactness tests' shared setting: 3 arithmetic demonstrations on the tiny model in
fp32, and one accumulated loss and gradient over a list of micro-batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agent_r1_async.config import RunConfig, config_from_dict
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.models import tiny_model_dir


def tiny_sft_config(tmp_path: Path) -> RunConfig:
    return config_from_dict({
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 512},
        "env": {"name": "arithmetic", "max_turns": 3, "args": {"digits": 1}},
        "engine": {"backend": "hf", "dtype": "float32", "max_new_tokens": 8},
        "learner": {"micro_batch_tokens": 4096, "bf16": False},
        "logging": {"wandb_mode": "disabled"},
        "launch": {"run_root": str(tmp_path / "runs"), "name": "sft"},
        "sft": {"num_demos": 3, "eval_before": False, "eval_after": False},
    })


def loss_and_grads(trainer: PolicyTrainer, mbs: Any) -> tuple[float, list[torch.Tensor]]:
    """The mean action-token NLL over `mbs` and its gradient, accumulated as `fit` does."""
    trainer.optimizer.zero_grad(set_to_none=True)
    action_tokens = sum(mb.num_action_tokens for mb in mbs)
    loss = 0.0
    for mb in mbs:
        nll = -trainer.forward(mb, raw=True).logprobs.sum() / action_tokens
        nll.backward()
        loss += float(nll.detach())
    return loss, [p.grad.detach().clone() for p in trainer.trainable_parameters()]

"""The module the trainer runs: an HF causal LM's decoder, its LM head read only at the
positions that predict an action token, and an optional value head (`PolicyNet`); FSDP2
sharding of it (`shard`), LoRA (`apply_lora`) and the learner's device (`resolve_device`).
learner/trainer.py explains the log-prob layout and the distributed setup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from agent_r1_async import config
from agent_r1_async.learner import prefix_tree
from agent_r1_async.learner.logprobs import head_logprobs


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class ForwardOut:
    logprobs: Tensor  # [B, T], 0 off the action tokens
    values: Tensor | None  # [V], V(s_t) at each step's last context token
    entropy: Tensor | None  # [B, T]


def apply_lora(model: Any, lora: config.LoraConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("learner.lora.enabled needs peft: pip install 'agent-r1-async[lora]'") from e
    cfg = LoraConfig(r=lora.rank, lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft takes a float
                     target_modules=list(lora.target_modules),
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


class PolicyNet(nn.Module):
    """Decoder → LM head at the positions that predict an action token (→ value head at each
    step's last context token): the one module whose forward the trainer calls, so that as the
    FSDP2 root its hooks gather and reduce the embedding, final norm, head and value head."""

    def __init__(self, lm: Any, value_head: nn.Linear | None) -> None:
        super().__init__()
        self.lm = lm
        self.value_head = value_head

    def forward(self, ids: Tensor, attention_mask: Tensor | None,
                predicts: Tensor | tuple[Tensor, Tensor], targets: Tensor,
                value_at: tuple[Tensor, Tensor] | None = None,
                sampling_params: tuple[float, float] = (1.0, 1.0),
                entropy: bool = False, chunk: int = 0,
                tree: tuple[Tensor, Tensor] | None = None,
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Log-probs [N] of `targets` (and entropies [N]) at the `predicts` positions under
        the (temperature, top_p) sampling distribution (`head_logprobs`); V(s_t) [V] at
        `value_at` = (sequence, position) per step, or None.

        `predicts`: a [B, T-1] mask (position j predicts token j + 1), or the (row, position)
        pairs of the hidden states that predict each target. `tree` = (segments, position_ids)
        of shared-prefix rows (learner/prefix_tree.py): their tree mask, built here, replaces
        `attention_mask`."""
        position_ids = None
        if tree is not None:
            segments, position_ids = tree
            attention_mask = prefix_tree.attention_mask(segments)
        hidden = self.lm.get_decoder()(
            input_ids=ids, attention_mask=attention_mask,
            position_ids=position_ids).last_hidden_state  # [B, T, H]
        at = hidden[predicts] if isinstance(predicts, tuple) else hidden[:, :-1][predicts]
        lp, ent = head_logprobs(self.lm.get_output_embeddings(), at,
                                targets, entropy, *sampling_params, chunk=chunk)
        values = None
        if value_at is not None and self.value_head is not None:
            last_ctx = hidden[value_at]  # [V, H]
            values = self.value_head(last_ctx.float()).squeeze(-1)
        return lp, ent, values


def shard(net: PolicyNet, bf16: bool, lcfg: config.LearnerConfig, device: torch.device) -> None:
    """FSDP2: one group per decoder layer (gathered only while that layer runs) + the root."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mp = MixedPrecisionPolicy()  # fp32 everywhere (CPU; CUDA without learner.bf16)
    if device.type == "cuda" and bf16:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy() if lcfg.cpu_offload else OffloadPolicy()
    for layer in net.lm.get_decoder().layers:
        fully_shard(layer, mp_policy=mp, offload_policy=offload)
    fully_shard(net, mp_policy=mp, offload_policy=offload)
    for m in net.modules():
        if isinstance(m, FSDPModule):  # sum over ranks: the loss is already globally normalised
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM

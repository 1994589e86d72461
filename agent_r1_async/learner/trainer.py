"""The policy under optimization: an HF causal LM (+ optional LoRA, value head) and AdamW.

Log-probs of action tokens are `log_softmax(logits[:, :-1]).gather(ids[:, 1:])`, but the LM
head is applied only at the positions that predict an action token (hidden states
[N, H] → logits [N, V]) instead of at every position ([B, T, V]): with a 49k vocabulary the
full logits of a 4k-token micro-batch would be ~0.8 GB in fp32, and context positions are
never trained; and over `learner.head_chunk_tokens` of them at a time, each chunk recomputed
in backward (`head_logprobs`), so a micro-batch's [N, V] logits never exist at once either.
Results are scattered back to [B, T] aligned with `input_ids`. A micro-batch with shared-prefix
rows (`MicroBatch.tree`, learner/prefix_tree.py) runs the decoder over those rows instead, with
their tree mask and position ids, and reads the mapped positions; the results land in the same
[B, T] layout. The softmax is
that of the distribution the engines sample from (`engine.temperature`, then `engine.top_p`;
`action_logprobs`), so proximal and current log-probs compare like with like with the
behavior log-probs; at temperature 1 and top-p 1 it is the plain log-softmax of the logits.

One optimizer step per pass over the batch: gradients accumulate over the micro-batches, each
loss divided by the whole batch's token (or row) count, so the accumulated gradient equals the
full-batch one. `proximal_pass` runs under no_grad before the first step of an update and
records proximal log-probs (and V(s_t) and reference log-probs when needed) for every row.
It is skipped when it would only repeat the training forward (`needs_proximal_pass`: one
optimizer step per batch, no value head, no reference): the proximal policy is then the
current one, and `optimize` uses its own log-probs, detached, as proximal — the same numbers
a separate no-grad pass computes, for a third less compute per update.

Distributed (`learner.world_size` > 1, a process group set up by learner/distributed.py):
the same class shards the model with FSDP2 (`torch.distributed.fsdp.fully_shard`) per decoder
layer plus the root, which is `PolicyNet` (decoder + LM head + value head in one forward, so
the root's all-gather and reduce-scatter hooks cover every parameter the trainer calls).
Parameters stay fp32 on CPU; on CUDA with `learner.bf16` they are gathered in bf16 and
gradients reduced in fp32 (MixedPrecisionPolicy). Each rank trains its share of the batch; the
loss denominator is the GLOBAL token (row) count and FSDP *sums* gradients over ranks
(divide factor 1), so the summed gradient is the full-batch one (see `optimize`). A rank with
fewer micro-batches than another runs zero-weight filler micro-batches: FSDP's collectives
need every rank to run the same number of forwards and backwards. Without a process group
nothing is sharded and every collective is the identity: world_size 1 is this same path.

Options: bf16 autocast (`learner.bf16`), on one process over a bf16 working copy of the weights
(`learner.bf16_copy`, learner/bf16_copy.py), decoder layers compiled by inductor
(`learner.compile`), gradient checkpointing, flash-attention 2 (CUDA and
`flash_attn` installed), LoRA through peft (published merged into the base weights), a value
head (linear on the last hidden state, read at each step's last context token) for PPO.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from agent_r1_async import config, models, precision
from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner import memory_savers, prefix_tree
from agent_r1_async.learner.batching import MicroBatch, filler_micro_batch
from agent_r1_async.learner.bf16_copy import Bf16Copy
from agent_r1_async.learner.logprobs import kl_reference
from agent_r1_async.learner.losses import ppo_loss, value_loss
from agent_r1_async.learner.mismatch import MismatchMeter
from agent_r1_async.learner.policy_net import (
    ForwardOut,
    PolicyNet,
    apply_lora,
    resolve_device,
    shard,
)


class StepClock:
    """Wall seconds per phase of an optimizer step: forward (incl. FSDP's all-gathers),
    backward (incl. its reduce-scatters), optimizer (clip + AdamW), sync (our own collectives
    on counts and metrics, where a rank waits for a slower one). CUDA: synchronised at each
    boundary, so the phases add up to the step."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.t = time.perf_counter()
        self.seconds = dict.fromkeys(("forward", "backward", "optimizer", "sync"), 0.0)

    def lap(self, phase: str) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.seconds[phase] += now - self.t
        self.t = now

    def metrics(self) -> dict[str, float]:
        return {f"time_{k}_s": v for k, v in self.seconds.items()}


def model_attention_cost(lm: Any) -> float:
    """ρ of the prefix-tree planner (learner/prefix_tree.py `attention_cost`) for a causal LM:
    its query width, layer count and decoder-layer parameters."""
    c = lm.config
    heads = c.num_attention_heads
    return prefix_tree.attention_cost(
        heads * (getattr(c, "head_dim", None) or c.hidden_size // heads), c.num_hidden_layers,
        sum(p.numel() for p in lm.get_decoder().layers.parameters()))


FORWARD_WORK = 1
"""A micro-batch's forward-only pass (the proximal pass), as the unit of an update's work."""
TRAIN_WORK = 3
"""A micro-batch's training pass: its forward and its backward, which costs about two more
(the recomputed layers' forward included), in `FORWARD_WORK` units."""


class PolicyTrainer:
    """Model, optional value head and reference, optimizer; forward/backward per micro-batch."""

    def __init__(self, cfg: config.RunConfig, model_path: str) -> None:
        self.cfg = cfg
        self.work_done = 0
        """Micro-batch passes begun since the learner's update reset it, in forward passes
        (`FORWARD_WORK`, `TRAIN_WORK`): the update's progress, read from another thread."""
        self.lcfg = cfg.learner
        self.algo = cfg.algorithm
        self.device = resolve_device(self.lcfg.device)
        self.bf16 = precision.learner_bf16(self.lcfg, self.device, model=cfg.model.name_or_path)
        """bf16 autocast over fp32 master weights (`learner.bf16`, auto resolved here)."""
        self.publish_dtype = getattr(
            torch, precision.engine_dtype(cfg.engine, model=cfg.model.name_or_path))
        """The engines' dtype: published weights are cast to it here, once, so the learner
        holds and sends half the bytes for bf16 engines (each engine would cast on load)."""
        memory_savers.configure_malloc(self.lcfg.malloc_mmap_threshold_kb * 1024)
        self.model_path = model_path
        self.attn_implementation, _ = models.attention_implementation(
            str(self.device), self.lcfg.flash_attention)
        model = models.load_causal_lm(model_path, dtype=cfg.model.dtype,
                                      attn_implementation=self.attn_implementation)
        model.config.use_cache = False
        if self.lcfg.gradient_checkpointing:  # non-reentrant: the variant FSDP2 supports
            kwargs: dict[str, Any] = {"use_reentrant": False}
            if self.lcfg.checkpoint_recompute == "pointwise":
                kwargs["context_fn"] = memory_savers.save_matmul_outputs
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.lora = self.lcfg.lora.enabled
        if self.lora:
            if self.lcfg.gradient_checkpointing:
                model.enable_input_require_grads()
            model = apply_lora(model, self.lcfg.lora)
        # Sharded, fully_shard moves each layer to the device as it shards it (one full layer
        # at a time on the GPU, not the whole model); CPU offload keeps the shards on the CPU.
        stay = self.lcfg.cpu_offload or dist_util.active()
        self.model = model if stay else model.to(self.device)
        self.model.train()
        self.attention_cost = model_attention_cost(self._causal_lm())
        """ρ of the prefix-tree planner (learner/prefix_tree.py): one query-key pair's FLOPs
        over one token's through the decoder layers' weights."""
        self.value_head: nn.Linear | None = None
        if self.algo.name == "ppo":
            self.value_head = nn.Linear(self._causal_lm().config.hidden_size, 1).to(self.device)
            nn.init.zeros_(self.value_head.weight)  # V ≡ bias = 0 at start: no random critic
            nn.init.zeros_(self.value_head.bias)
        self.reference: PolicyNet | None = None
        if self.algo.kl_coef > 0 and not self.lora:  # LoRA: the base model with adapters off
            ref = copy.deepcopy(self._causal_lm()).eval().requires_grad_(False)
            self.reference = PolicyNet(ref, None)
        self.net = PolicyNet(self._causal_lm(), self.value_head)
        self.sharded = dist_util.active()
        if self.lcfg.cpu_offload and self.device.type != "cuda":
            raise ValueError(f"learner.cpu_offload needs a CUDA learner.device, not {self.device}")
        if self.sharded:
            shard(self.net, self.bf16, self.lcfg, self.device)
            if self.reference is not None:
                shard(self.reference, self.bf16, self.lcfg, self.device)
        elif self.lcfg.cpu_offload:
            raise ValueError("learner.cpu_offload needs the FSDP2 path (a process group)")
        self.bf16_copy: Bf16Copy | None = None
        """bf16 working copy for forward/backward (learner/bf16_copy.py), where bf16 is on and
        `precision.bf16_copy_allowed`; never inside a process group (the master is sharded)."""
        if self.bf16 and precision.bf16_copy_allowed(self.lcfg) and not self.sharded:
            self.bf16_copy = Bf16Copy(self.net)
        if self.lcfg.compile:  # in place: module names, state dicts and checkpoints unchanged
            trained = self.bf16_copy.module if self.bf16_copy is not None else self.net
            lm: Any = trained.lm
            layers: nn.ModuleList = lm.get_decoder().layers
            for layer in layers:
                layer.compile(dynamic=True)
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(), lr=self.lcfg.lr, betas=tuple(self.lcfg.betas),
            weight_decay=self.lcfg.weight_decay,
        )
        pad = getattr(self._causal_lm().config, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0

    @property
    def shared_prefix(self) -> bool:
        """Train sequences that share a prefix as one row with a tree mask
        (`learner.shared_prefix`, learner/prefix_tree.py); off under flash-attention 2, whose
        kernels take no 4D mask (then every sequence is its own row)."""
        return self.lcfg.shared_prefix and self.attn_implementation != "flash_attention_2"

    def _causal_lm(self) -> Any:
        """The HF causal LM (for LoRA: the base model with adapter layers injected)."""
        return self.model.get_base_model() if self.lora else self.model

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Model then value-head parameters (FSDP2: this rank's DTensor shards of them)."""
        return [p for p in self.net.parameters() if p.requires_grad]

    def _autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def forward(self, mb: MicroBatch, net: PolicyNet | None = None, values: bool = False,
                entropy: bool = False, raw: bool = False) -> ForwardOut:
        """Action-token log-probs [B, T] (and V(s_t), entropy) for one micro-batch.

        Log-probs and entropy are of the sampling distribution (`engine.temperature`, then
        `engine.top_p`: what the behavior policy sampled from, see `action_logprobs`); `raw`
        gives the model's own softmax instead (SFT's likelihood).
        """
        if net is None:
            net = self.net
            if self.bf16_copy is not None:
                self.bf16_copy.refresh()
                net = self.bf16_copy.module
        dev = self.device
        ids = mb.input_ids.to(dev)
        action = mb.action_mask.to(dev)
        eng = self.cfg.engine  # the behavior policy sampled at engine.temperature / top_p
        params = (1.0, 1.0) if raw else (eng.temperature, eng.top_p)
        want_values = values and self.value_head is not None
        if mb.tree is None:
            predicts = action[:, 1:]  # [B, T-1]: position j predicts token j + 1
            idx = (mb.value_seq.to(dev), mb.value_index.to(dev)) if want_values else None
            with self._autocast():
                lp, ent, vals = net(ids, mb.attention_mask.to(dev), predicts,
                                    ids[:, 1:][predicts], idx, params, entropy,
                                    self.lcfg.head_chunk_tokens)  # [N], [N], [V]
        else:  # shared-prefix rows; the reads mapped into them (learner/prefix_tree.py)
            t = mb.tree
            at = (t.predict_row.to(dev), t.predict_pos.to(dev))
            idx = (t.value_row.to(dev), t.value_pos.to(dev)) if want_values else None
            with self._autocast():
                lp, ent, vals = net(t.input_ids.to(dev), None, at, ids[action], idx, params,
                                    entropy, self.lcfg.head_chunk_tokens,
                                    (t.segments.to(dev), t.position_ids.to(dev)))
        # Row-major order of `predicts` = that of `action` (shifted by one within each row).
        zeros = torch.zeros(ids.shape, dtype=torch.float32, device=dev)
        out = ForwardOut(zeros.masked_scatter(action, lp), None, None)
        if ent is not None:
            out.entropy = zeros.masked_scatter(action, ent)
        out.values = vals
        return out

    def needs_proximal_pass(self, epochs: int) -> bool:
        """False when the proximal log-probs equal the training forward's (see module doc)."""
        return epochs > 1 or self.value_head is not None or self.algo.kl_coef > 0

    def _summed_metrics(self) -> list[str]:
        """Metric sums every rank reports, even a rank whose micro-batches are all fillers."""
        keys = list(_SUMMED)
        if self.algo.kl_coef > 0:
            keys.append("kl_ref")
        if self.algo.entropy_coef > 0:
            keys.append("entropy")
        if self.value_head is not None:
            keys += ["value_loss", "value_err_sum"]
        return keys

    def _lockstep(self, mbs: list[MicroBatch]) -> list[tuple[MicroBatch, bool]]:
        """This rank's micro-batches, then zero-weight fillers up to the busiest rank's count
        (FSDP's per-layer collectives need the same number of passes on every rank)."""
        n = int(dist_util.all_reduce([len(mbs)], op="max")[0])
        return [(mb, True) for mb in mbs] + [(filler_micro_batch(self.pad_id), False)] * (n - len(mbs))

    @torch.no_grad()
    def proximal_pass(self, mbs: list[MicroBatch]) -> None:
        """Record proximal log-probs (+ old values, reference log-probs) on every micro-batch."""
        for mb, real in self._lockstep(mbs):
            self.work_done += FORWARD_WORK
            out = self.forward(mb, values=self.value_head is not None)
            ref = self._reference_logprobs(mb) if self.algo.kl_coef > 0 else None
            if real:
                mb.proximal_logprobs = out.logprobs.cpu()
                mb.old_values = out.values.cpu() if out.values is not None else None
                mb.reference_logprobs = ref

    def _reference_logprobs(self, mb: MicroBatch) -> Tensor:
        if self.lora:
            with self.model.disable_adapter():
                return self.forward(mb).logprobs.cpu()
        return self.forward(mb, net=self.reference).logprobs.cpu()

    def optimize(self, mbs: list[MicroBatch], version: int | None = None,
                 counts: tuple[int, int] | None = None) -> dict[str, float]:
        """One optimizer step over all micro-batches (gradient accumulation); returns metrics,
        with the training–inference mismatch of the batch (`MismatchMeter`; `version`: the
        proximal policy's, which makes a token fresh). `counts`: the whole batch's (steps,
        action tokens) when `mbs` leave steps out (`learner.skip_zero_advantage`); None: the
        micro-batches' own, summed over ranks. With no micro-batch on any rank the step still
        runs, on zero gradients, as a forward of zero loss would give: AdamW's momentum and
        weight decay move the weights as they would have.

        Normaliser, global over ranks: each micro-batch loss is its token sum divided by the
        WHOLE batch's action tokens (rows for seq-mean-token-sum) summed over all ranks, and
        FSDP sums (not averages) the ranks' gradients, so Σ_ranks Σ_micro ∇loss = ∇(full-batch
        loss). By hand: rank 0 holds two tokens with ℓ = 1, 2 and rank 1 one with ℓ = 3; the
        denominator is 3, the ranks' losses 3/3 and 3/3 sum to 2 = mean(1, 2, 3). Normalising
        per rank (1.5 and 3) and averaging would give 2.25: the lone token counted double.
        """
        self.optimizer.zero_grad(set_to_none=True)
        clock = StepClock(self.device)
        rows, tokens = counts if counts is not None else dist_util.all_reduce(
            [sum(mb.steps for mb in mbs), sum(mb.num_action_tokens for mb in mbs)])
        denom = tokens if self.algo.loss_agg == "token-mean" else rows
        sums = dict.fromkeys(self._summed_metrics(), 0.0)
        w_max = 0.0
        mismatch = MismatchMeter(self.algo, version)
        passes = self._lockstep(mbs)
        for mb, real in passes:
            self.work_done += TRAIN_WORK
            clock.lap("sync")
            out = self.forward(mb, values=self.value_head is not None,
                               entropy=self.algo.entropy_coef > 0)
            dev = self.device
            proximal = (out.logprobs.detach() if mb.proximal_logprobs is None
                        else mb.proximal_logprobs.to(dev))
            if real:
                mb.used_proximal = proximal
            reference = _to(mb.reference_logprobs, dev)
            if reference is not None and self.cfg.engine.top_p < 1:
                reference = kl_reference(out.logprobs, reference)
            loss, m = ppo_loss(
                out.logprobs, proximal, mb.behavior_logprobs.to(dev),
                mb.advantages.to(dev), mb.action_mask.to(dev), self.algo, denominator=denom,
                sample_weights=mb.sample_weights.to(dev)[:, None],
                reference_logprobs=reference, entropy=out.entropy,
            )
            if out.values is not None:
                vl, vm = value_loss(out.values, mb.old_values.to(dev), mb.value_targets.to(dev),
                                    self.algo.value_clip, denominator=rows)
                loss = loss + self.algo.value_coef * vl
                m.update(vm)
            clock.lap("forward")
            if not real:  # filler: runs the collectives, contributes an exactly-zero gradient
                (loss * 0.0).backward()
                clock.lap("backward")
                continue
            loss.backward()
            clock.lap("backward")
            mismatch.add(proximal, mb.behavior_logprobs.to(dev), mb.action_mask.to(dev),
                         mb.token_versions)
            m["loss"] = loss.detach()
            w_max = max(w_max, float(m.pop("is_weight_max")))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        if not passes:  # every rank: nothing to compute (all steps left out)
            for p in self.trainable_parameters():
                p.grad = torch.zeros_like(p)
        clip = self.lcfg.grad_clip if self.lcfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), clip)
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor of the global norm
            grad_norm = grad_norm.full_tensor()
        self.optimizer.step()
        clock.lap("optimizer")
        keys = sorted(sums)  # the same keys on every rank: _SUMMED + the configured terms
        sums = dict(zip(keys, dist_util.all_reduce([sums[k] for k in keys]), strict=True))
        w_max = dist_util.all_reduce([w_max], op="max")[0]
        gaps = mismatch.metrics()
        clock.lap("sync")
        return {**_finish_metrics(sums, w_max, float(grad_norm)), **gaps, **clock.metrics()}

    @torch.no_grad()
    def iter_published(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
        """(HF name, full CPU tensor) one at a time (LoRA merged, tied duplicates dropped),
        floating tensors cast to `dtype` (None: as trained, fp32 master weights).

        Sharded: every rank must iterate to the end (each tensor is an all-gather); only rank
        0 receives the tensors, and each is gathered just before it is yielded, so no rank
        holds more than one full tensor beyond what its consumer keeps."""
        lm = self._causal_lm()
        if self.lora:
            self.model.merge_adapter()
        try:
            seen: set[int] = set()
            # keep_vars: the Parameter objects themselves, so a tied weight is seen once
            # (lm_head = embed_tokens, dropped like save_pretrained does).
            for name, t in lm.state_dict(keep_vars=True).items():
                if "lora_" in name or id(t) in seen:
                    continue
                seen.add(id(t))
                full = t.full_tensor() if hasattr(t, "full_tensor") else t
                if dist_util.rank() == 0:
                    # copy while merged (and off the FSDP gather buffer)
                    cast = dtype if dtype is not None and full.is_floating_point() else None
                    yield name.replace(".base_layer.", "."), full.detach().to(
                        "cpu", dtype=cast, copy=True)
                del full
        finally:
            if self.lora:
                self.model.unmerge_adapter()

    def published_state_dict(self, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
        """Full model weights under their HF names on rank 0 (other ranks: {}), floating ones
        in `dtype` (None: fp32 master weights, as checkpoints keep them; the engines' dtype
        for publishing, `publish_dtype`); a collective when sharded."""
        return dict(self.iter_published(dtype))

def _to(t: Tensor | None, device: torch.device) -> Tensor | None:
    return None if t is None else t.to(device)


_SUMMED = ("loss", "pg_loss", "tokens", "clip_low_sum", "clip_high_sum", "is_weight_sum",
           "masked_sum", "mismatch_kl_sum", "approx_kl_sum")


def _finish_metrics(sums: dict[str, float], w_max: float, grad_norm: float) -> dict[str, float]:
    n = max(sums.get("tokens", 0.0), 1.0)
    out = {
        "loss": sums.get("loss", 0.0),
        "pg_loss": sums.get("pg_loss", 0.0),
        "clip_frac_low": sums.get("clip_low_sum", 0.0) / n,
        "clip_frac_high": sums.get("clip_high_sum", 0.0) / n,
        "is_weight_mean": sums.get("is_weight_sum", 0.0) / n,
        "is_weight_max": w_max,
        "masked_frac": sums.get("masked_sum", 0.0) / n,
        "mismatch_kl": sums.get("mismatch_kl_sum", 0.0) / n,
        "approx_kl": sums.get("approx_kl_sum", 0.0) / n,
        "grad_norm": grad_norm,
        "action_tokens": sums.get("tokens", 0.0),
    }
    for k in ("kl_ref", "entropy", "value_loss"):
        if k in sums:
            out[k] = sums[k]
    return out

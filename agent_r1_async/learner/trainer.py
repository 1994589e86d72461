"""The policy under optimization: an HF causal LM (+ optional LoRA, value head) and AdamW.

Log-probs of action tokens are `log_softmax(logits[:, :-1]).gather(ids[:, 1:])`, but the LM
head is applied only at the positions that predict an action token (hidden states
[N, H] → logits [N, V]) instead of at every position ([B, T, V]): with a 49k vocabulary the
full logits of a 4k-token micro-batch would be ~0.8 GB in fp32, and context positions are
never trained. Results are scattered back to [B, T] aligned with `input_ids`. The softmax is
that of the distribution the engines sample from (`engine.temperature`, then `engine.top_p`;
`action_logprobs`), so proximal and current log-probs compare like with like with the
behavior log-probs; at temperature 1 and top-p 1 it is the plain softmax, computed as before.

One optimizer step per pass over the batch: gradients accumulate over the micro-batches, each
loss divided by the whole batch's token (or row) count, so the accumulated gradient equals the
full-batch one. `proximal_pass` runs under no_grad before the first step of an update and
records proximal log-probs (and V(s_t) and reference log-probs when needed) for every row.
It is skipped when it would only repeat the training forward (`needs_proximal_pass`: one
optimizer step per batch, no value head, no reference): the proximal policy is then the
current one, and `optimize` uses its own log-probs, detached, as proximal — the same numbers
a separate no-grad pass computes, for a third less compute per update.

Options: bf16 autocast (`learner.bf16`), gradient checkpointing, flash-attention 2 (CUDA and
`flash_attn` installed), LoRA through peft (published merged into the base weights), a value
head (linear on the last hidden state, read at each step's last context token) for PPO.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from agent_r1_async import config, models, sampling
from agent_r1_async.learner.batching import MicroBatch
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB, ppo_loss, value_loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class ForwardOut:
    logprobs: Tensor  # [B, T], 0 off the action tokens
    values: Tensor | None  # [B], V(s_t) at the last context token
    entropy: Tensor | None  # [B, T]


def apply_lora(model: Any, lora: config.LoraConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("learner.lora.enabled needs peft: pip install 'agent-r1-async[lora]'") from e
    cfg = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=list(lora.target_modules),
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


class PolicyTrainer:
    """Model, optional value head and reference, optimizer; forward/backward per micro-batch."""

    def __init__(self, cfg: config.RunConfig, model_path: str) -> None:
        self.cfg = cfg
        self.lcfg = cfg.learner
        self.algo = cfg.algorithm
        self.device = resolve_device(self.lcfg.device)
        self.model_path = model_path
        self.attn_implementation, _ = models.attention_implementation(
            str(self.device), self.lcfg.flash_attention)
        model = models.load_causal_lm(model_path, dtype=cfg.model.dtype,
                                      attn_implementation=self.attn_implementation)
        model.config.use_cache = False
        if self.lcfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.lora = self.lcfg.lora.enabled
        if self.lora:
            if self.lcfg.gradient_checkpointing:
                model.enable_input_require_grads()
            model = apply_lora(model, self.lcfg.lora)
        self.model = model.to(self.device)
        self.model.train()
        hidden = self._causal_lm().config.hidden_size
        self.value_head: nn.Linear | None = None
        if self.algo.name == "ppo":
            self.value_head = nn.Linear(hidden, 1).to(self.device)
            nn.init.zeros_(self.value_head.weight)  # V ≡ bias = 0 at start: no random critic
            nn.init.zeros_(self.value_head.bias)
        self.reference: Any = None
        if self.algo.kl_coef > 0 and not self.lora:  # LoRA: the base model with adapters off
            self.reference = copy.deepcopy(self._causal_lm()).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(), lr=self.lcfg.lr, betas=tuple(self.lcfg.betas),
            weight_decay=self.lcfg.weight_decay,
        )
        pad = getattr(self._causal_lm().config, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0

    def _causal_lm(self) -> Any:
        """The HF causal LM (for LoRA: the base model with adapter layers injected)."""
        return self.model.get_base_model() if self.lora else self.model

    def trainable_parameters(self) -> list[nn.Parameter]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.value_head is not None:
            params += list(self.value_head.parameters())
        return params

    def _autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.lcfg.bf16)

    def forward(self, mb: MicroBatch, lm: Any = None, values: bool = False,
                entropy: bool = False, raw: bool = False) -> ForwardOut:
        """Action-token log-probs [B, T] (and V(s_t), entropy) for one micro-batch.

        Log-probs and entropy are of the sampling distribution (`engine.temperature`, then
        `engine.top_p`: what the behavior policy sampled from, see `action_logprobs`); `raw`
        gives the model's own softmax instead (SFT's likelihood).
        """
        lm = lm if lm is not None else self._causal_lm()
        ids = mb.input_ids.to(self.device)
        action = mb.action_mask.to(self.device)
        with self._autocast():
            hidden = lm.get_decoder()(
                input_ids=ids, attention_mask=mb.attention_mask.to(self.device)
            ).last_hidden_state  # [B, T, H]
            predicts = action[:, 1:]  # [B, T-1]: position j predicts token j + 1
            logits = lm.get_output_embeddings()(hidden[:, :-1][predicts]).float()  # [N, V]
        eng = self.cfg.engine  # the behavior policy sampled at engine.temperature / top_p
        lp, ent = action_logprobs(logits, ids[:, 1:][predicts], entropy,
                                  1.0 if raw else eng.temperature, 1.0 if raw else eng.top_p)
        # Row-major order of `predicts` = that of `action` (shifted by one within each row).
        zeros = torch.zeros(ids.shape, dtype=torch.float32, device=self.device)
        out = ForwardOut(zeros.masked_scatter(action, lp), None, None)
        if ent is not None:
            out.entropy = zeros.masked_scatter(action, ent)
        if values and self.value_head is not None:
            idx = mb.value_index.to(self.device)
            last_ctx = hidden[torch.arange(ids.shape[0], device=self.device), idx]  # [B, H]
            out.values = self.value_head(last_ctx.float()).squeeze(-1)
        return out

    def needs_proximal_pass(self, epochs: int) -> bool:
        """False when the proximal log-probs equal the training forward's (see module doc)."""
        return epochs > 1 or self.value_head is not None or self.algo.kl_coef > 0

    @torch.no_grad()
    def proximal_pass(self, mbs: list[MicroBatch]) -> None:
        """Record proximal log-probs (+ old values, reference log-probs) on every micro-batch."""
        for mb in mbs:
            out = self.forward(mb, values=self.value_head is not None)
            mb.proximal_logprobs = out.logprobs.cpu()
            mb.old_values = out.values.cpu() if out.values is not None else None
            if self.algo.kl_coef > 0:
                mb.reference_logprobs = self._reference_logprobs(mb)

    def _reference_logprobs(self, mb: MicroBatch) -> Tensor:
        if self.lora:
            with self.model.disable_adapter():
                return self.forward(mb).logprobs.cpu()
        return self.forward(mb, lm=self.reference).logprobs.cpu()

    def optimize(self, mbs: list[MicroBatch]) -> dict[str, float]:
        """One optimizer step over all micro-batches (gradient accumulation); returns metrics."""
        self.optimizer.zero_grad(set_to_none=True)
        rows = sum(mb.steps for mb in mbs)
        tokens = sum(mb.num_action_tokens for mb in mbs)
        denom = tokens if self.algo.loss_agg == "token-mean" else rows
        sums: dict[str, float] = {}
        w_max = 0.0
        for mb in mbs:
            out = self.forward(mb, values=self.value_head is not None,
                               entropy=self.algo.entropy_coef > 0)
            dev = self.device
            proximal = (out.logprobs.detach() if mb.proximal_logprobs is None
                        else mb.proximal_logprobs.to(dev))
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
            loss.backward()
            m["loss"] = loss.detach()
            w_max = max(w_max, float(m.pop("is_weight_max")))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        clip = self.lcfg.grad_clip if self.lcfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), clip)
        self.optimizer.step()
        return _finish_metrics(sums, w_max, float(grad_norm))

    @torch.no_grad()
    def published_state_dict(self) -> dict[str, Tensor]:
        """Full model weights under their HF names (LoRA merged), tied duplicates dropped."""
        lm = self._causal_lm()
        if self.lora:
            self.model.merge_adapter()
        try:
            out: dict[str, Tensor] = {}
            seen: set[int] = set()
            for name, t in lm.state_dict().items():
                if "lora_" in name:
                    continue
                if t.data_ptr() in seen:  # tied (lm_head = embed_tokens): like save_pretrained
                    continue
                seen.add(t.data_ptr())
                key = name.replace(".base_layer.", ".")
                out[key] = t.detach().to("cpu", copy=True)  # copy while merged
        finally:
            if self.lora:
                self.model.unmerge_adapter()
        return out


def action_logprobs(
    logits: Tensor, targets: Tensor, entropy: bool, temperature: float, top_p: float
) -> tuple[Tensor, Tensor | None]:
    """Log-probs [N] of `targets` [N] (and entropies [N]) under the sampling distribution of
    fp32 `logits` [N, V]: temperature, then top-p, as the engines sample
    (`agent_r1_async.sampling`), so proximal, current and reference log-probs compare like
    with like with the behavior log-probs the engines report.

    At temperature 1 and top-p 1 this is exactly the plain log_softmax (no sort, same ops).

    A sampled token is always inside the behavior policy's top-p set, but may be outside the
    proximal or current policy's (their logits differ): its log-prob there is -inf, which
    gives NaN (-inf - -inf in log r when both are outside; 0·inf in backward). It gets the
    constant OUTSIDE_TOP_P_LOGPROB instead (no gradient), and the IS machinery of the loss
    treats it as the probability 0 it stands for:
    - current outside: log r = -50 - proximal, r ≈ 0; A > 0: the r·A branch binds, A < 0: the
      clipped (1 - ε_low)·A branch binds; either way no gradient (the log-prob is a constant).
    - proximal outside (the behavior policy was staler): the true w is 0; the token is rejected
      (`losses.importance_weights`; counted in `masked_frac`), whatever current is.
    - reference outside (KL): k3(current ‖ reference) ≈ 49 + current, a unit push down on a
      token the reference cannot sample; current outside: see `kl_reference`.
    - `mismatch_kl` counts a proximal-outside token as a large finite divergence (≈ 49 +
      behavior; the true one is infinite).
    -50 rather than -inf or a huge negative value: every exp in the loss stays finite in fp32
    (e^50 ≈ 5e21 < 3e38) because real log-probs are ≤ 0, so the values are finite too.
    """
    if temperature == 1.0 and top_p >= 1.0:
        logp_all = torch.log_softmax(logits, dim=-1)
        lp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        ent = -(logp_all.exp() * logp_all).sum(-1) if entropy else None
        return lp, ent
    logp_all = torch.log_softmax(sampling.process_logits(logits, temperature, top_p), dim=-1)
    lp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    lp = torch.where(lp.isneginf(), OUTSIDE_TOP_P_LOGPROB, lp)  # where: no grad to -inf
    ent = None
    if entropy:  # dropped tokens: p = 0 and 0·log 0 = 0 (nan_to_num keeps the grad finite)
        ent = -(logp_all.exp() * logp_all.nan_to_num(neginf=0.0)).sum(-1)
    return lp, ent


def kl_reference(current: Tensor, reference: Tensor) -> Tensor:
    """Reference log-probs for k3(current ‖ reference), [B, T]: where the current policy cannot
    sample the token (its log-prob is the OUTSIDE_TOP_P_LOGPROB floor) the reference's is set
    to the floor too, so the token adds 0, as it does to the true KL = E_current[log π/π_ref];
    left alone, its k3 value would be e^(reference + 50), ~1e16 in `kl_ref` and the loss
    (measured on the tiny model at T = 0.8, top-p 0.9), for no gradient.
    """
    return torch.where(current.detach() == OUTSIDE_TOP_P_LOGPROB, OUTSIDE_TOP_P_LOGPROB, reference)


def _to(t: Tensor | None, device: torch.device) -> Tensor | None:
    return None if t is None else t.to(device)


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

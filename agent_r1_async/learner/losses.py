"""Losses: pure functions of [B, T] tensors (rows × token positions) and a mask.

Decoupled PPO (three policies, named after the math):

    r = exp(current − proximal)                 trust region around the proximal policy
    w = min(exp(proximal − behavior), c_max)     truncated importance weight (off-policy fix)
    ℓ = −w · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)                 per action token
      + kl_coef · k3(current ‖ reference) − entropy_coef · H(current)

Tokens whose (untruncated) weight leaves [is_mask_low, is_mask_high] are rejected (their loss
is zero); a bound of 0 is off. So are tokens the proximal policy cannot sample (outside its
top-p set: OUTSIDE_TOP_P_LOGPROB, a true w of 0). `w` and the mask are constants (no gradient).

Aggregation with gradient accumulation in mind: each call sums over its micro-batch and
divides by `denominator`, which the caller sets to the *whole batch's* count (action tokens
for `token-mean`, rows for `seq-mean-token-sum`); summing the micro-batch losses then gives
exactly the full-batch loss. With `denominator=None` the micro-batch's own count is used.
Rejected tokens stay in the denominator (they contribute zero, like a clipped token).

Metrics are returned as sums over the micro-batch's action tokens (`*_sum`) plus `tokens`,
so the caller can token-weight them across micro-batches; `is_weight_max` is a max.

Hyper-parameters (ε, c_max, the mask band, coefficients, aggregation) are read from the run's
`AlgorithmConfig` (`algorithm.*`) passed straight in: one home per setting, no parameter class
repeating its defaults.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from agent_r1_async.config import AlgorithmConfig

LossAgg = Literal["token-mean", "seq-mean-token-sum"]

OUTSIDE_TOP_P_LOGPROB = -50.0
"""The learner's log-prob for a sampled token outside its policy's top-p set (truly -inf;
learner/trainer.py `action_logprobs` says why -50). A proximal log-prob equal to it means
probability 0 (true w = 0): the token is rejected (its loss is exactly 0) and left out of
`approx_kl`. Real log-probs are never exactly -50.0, so default runs are unaffected."""


def k3_kl(logp: Tensor, logq: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(p‖q) from samples of p: e^(q−p) − (q−p) − 1 ≥ 0."""
    d = logq - logp
    return torch.exp(d) - d - 1.0


def aggregate(per_token: Tensor, mask: Tensor, agg: LossAgg, denominator: float | None) -> Tensor:
    """Sum of masked per-token values over the batch, divided by tokens or rows."""
    m = mask.to(per_token.dtype)
    if agg == "token-mean":
        total = (per_token * m).sum()
        count = m.sum() if denominator is None else denominator
    elif agg == "seq-mean-token-sum":
        row_sums = (per_token * m).sum(dim=-1)  # [B]
        total = row_sums.sum()
        count = (m.sum(dim=-1) > 0).sum() if denominator is None else denominator
    else:
        raise ValueError(f"algorithm.loss_agg: unknown aggregation {agg!r}")
    return total / torch.clamp(torch.as_tensor(count, dtype=per_token.dtype), min=1.0)


def importance_weights(
    proximal_logprobs: Tensor, behavior_logprobs: Tensor, algo: AlgorithmConfig
) -> tuple[Tensor, Tensor]:
    """(truncated weight w, keep mask) from proximal and behavior log-probs; no gradient."""
    raw = torch.exp(proximal_logprobs - behavior_logprobs).detach()
    # The true w is 0 where the proximal policy cannot sample the token: rejected outright,
    # since r = current / 0 would otherwise let w·r·A through the unclipped branch (A < 0).
    keep = proximal_logprobs.detach() != OUTSIDE_TOP_P_LOGPROB
    if algo.is_mask_low > 0:
        keep &= raw >= algo.is_mask_low
    if algo.is_mask_high > 0:
        keep &= raw <= algo.is_mask_high
    return torch.clamp(raw, max=algo.c_max), keep


def ppo_loss(
    current_logprobs: Tensor,
    proximal_logprobs: Tensor,
    behavior_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    algo: AlgorithmConfig,
    *,
    denominator: float | None = None,
    sample_weights: Tensor | None = None,
    reference_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Decoupled, importance-corrected PPO loss; all tensors [B, T], `mask` marks action tokens.

    `sample_weights` ([B, T] or broadcastable) multiplies each token's policy loss (prioritized
    replay correction). Returns (loss, metrics); the loss includes KL and entropy terms.
    """
    mask = mask.bool()
    w, keep = importance_weights(proximal_logprobs, behavior_logprobs, algo)
    log_ratio = current_logprobs - proximal_logprobs
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - algo.eps_low, 1.0 + algo.eps_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    per_token = -w * surrogate * keep
    if sample_weights is not None:
        per_token = per_token * sample_weights
    pg_loss = aggregate(per_token, mask, algo.loss_agg, denominator)
    loss = pg_loss
    metrics: dict[str, Tensor] = {"pg_loss": pg_loss.detach()}
    if reference_logprobs is not None and algo.kl_coef > 0:
        kl = aggregate(k3_kl(current_logprobs, reference_logprobs), mask, algo.loss_agg, denominator)
        loss = loss + algo.kl_coef * kl
        metrics["kl_ref"] = kl.detach()
    if entropy is not None and algo.entropy_coef > 0:
        ent = aggregate(entropy, mask, algo.loss_agg, denominator)
        loss = loss - algo.entropy_coef * ent
        metrics["entropy"] = ent.detach()
    metrics.update(_ppo_metrics(ratio, w, keep, mask, advantages, algo, proximal_logprobs,
                                behavior_logprobs, log_ratio))
    return loss, metrics


@torch.no_grad()
def _ppo_metrics(
    ratio: Tensor, w: Tensor, keep: Tensor, mask: Tensor, advantages: Tensor,
    algo: AlgorithmConfig, proximal: Tensor, behavior: Tensor, log_ratio: Tensor,
) -> dict[str, Tensor]:
    """Token sums over the mask (divide by `tokens` after summing across micro-batches)."""
    m = mask.to(ratio.dtype)
    approx_kl = k3_kl(proximal, proximal + log_ratio.detach())  # e^(current + 50) if outside
    approx_kl = torch.where(proximal == OUTSIDE_TOP_P_LOGPROB, 0.0, approx_kl)
    # A token is clipped when the clipped branch is the (strictly) binding one.
    low = (ratio < 1.0 - algo.eps_low) & (advantages < 0)
    high = (ratio > 1.0 + algo.eps_high) & (advantages > 0)
    return {
        "tokens": m.sum(),
        "clip_low_sum": (low.to(m.dtype) * m).sum(),
        "clip_high_sum": (high.to(m.dtype) * m).sum(),
        "is_weight_sum": (w * m).sum(),
        "is_weight_max": (w * m).max() if m.numel() else torch.zeros(()),
        "masked_sum": ((~keep).to(m.dtype) * m).sum(),
        "mismatch_kl_sum": (k3_kl(behavior, proximal) * m).sum(),
        "approx_kl_sum": (approx_kl * m).sum(),
    }


def value_loss(
    values: Tensor, old_values: Tensor, targets: Tensor, clip: float, denominator: float | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss over rows (one value per step): 0.5·max((V−R)², (V_clip−R)²).

    V_clip = V_old + clip(V − V_old, −clip, clip); `clip <= 0` disables clipping. Summed over
    the [B] rows and divided by `denominator` (default B), like `aggregate`.
    """
    err = (values - targets) ** 2
    if clip > 0:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (v_clip - targets) ** 2)
    count = values.numel() if denominator is None else denominator
    loss = 0.5 * err.sum() / max(count, 1)
    return loss, {"value_loss": loss.detach(), "value_err_sum": err.detach().sum()}

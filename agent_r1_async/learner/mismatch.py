"""The training–inference mismatch of one update, measured on its action tokens.

The behavior log-probs come from the engine (its kernels, its dtype); the proximal ones from
the learner at the policy version it trains from. Two things separate them:
- staleness: a token sampled at version v − k came from another policy;
- numerics: even a fresh token (sampled at version v) differs when the engine and the learner
  round differently (bf16 engine vs fp32 master weights under bf16 autocast, other kernels).
Decoupled PPO corrects both with w = exp(proximal − behavior), truncated at `algorithm.c_max`
and optionally masked outside [`is_mask_low`, `is_mask_high`]. `MismatchMeter` says how large
the correction is, per update (metrics under `mismatch/`):

    logprob_gap_mean, logprob_gap_p99   |proximal − behavior| over all action tokens
    logprob_gap_fresh_mean              the same over fresh tokens only: numerics alone
    fresh_frac                          share of action tokens that are fresh
    is_weight_p01, is_weight_p99        quantiles of the untruncated weight exp(proximal − behavior)
    truncated_frac                      share of tokens whose weight exceeds c_max
    guard_frac                          share that truncation or masking touched

(`is_weight/mismatch_kl`, `is_weight/masked_frac` and the weight's mean and max come from
the loss, losses.py.) Quantiles are linear-interpolated (`torch.quantile`) over this rank's
tokens; with several learner ranks the p99 is the largest rank's and the p01 the smallest's,
the means are exact.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB, importance_weights

_SUMS = ("tokens", "gap_tokens", "fresh_tokens", "gap_sum", "fresh_gap_sum", "truncated",
         "guarded")


class MismatchMeter:
    """Accumulates an update's micro-batches (`add`), then reports (`metrics`, a collective
    when sharded: every rank calls it)."""

    def __init__(self, algo: AlgorithmConfig, version: int | None) -> None:
        self.algo = algo
        self.version = version
        """The proximal policy's version (None: freshness unknown, fresh stats left out)."""
        self.sums = dict.fromkeys(_SUMS, 0.0)
        self._gaps: list[Tensor] = []

    def add(self, proximal: Tensor, behavior: Tensor, mask: Tensor,
            token_versions: Tensor | None = None) -> None:
        """One micro-batch: [B, T] log-probs, the action mask and each token's version."""
        with torch.no_grad():
            m = mask.bool()
            gap = (proximal.detach().float() - behavior.float())[m]  # [N]
            _, keep = importance_weights(proximal, behavior, self.algo)  # the loss's own mask
            masked = ~keep[m]
            truncated = torch.exp(gap) > self.algo.c_max
            # A proximal log-prob at the top-p floor is a probability of 0, not a measured
            # gap: it counts as masked, and stays out of the gap statistics.
            rejected = proximal.detach()[m] == OUTSIDE_TOP_P_LOGPROB
            real = gap[~rejected].abs()
            s = self.sums
            s["tokens"] += float(m.sum())
            s["gap_tokens"] += float(real.numel())
            s["gap_sum"] += float(real.sum())
            s["truncated"] += float(truncated.sum())
            s["guarded"] += float((truncated | masked).sum())
            self._gaps.append(gap[~rejected].cpu())
            if token_versions is not None and self.version is not None:
                fresh = (token_versions.to(m.device)[m] == self.version) & ~rejected
                s["fresh_tokens"] += float(fresh.sum())
                s["fresh_gap_sum"] += float(gap[fresh].abs().sum())

    def metrics(self) -> dict[str, float]:
        keys = list(_SUMS)
        s = dict(zip(keys, dist_util.all_reduce([self.sums[k] for k in keys]), strict=True))
        gaps = torch.cat(self._gaps) if self._gaps else torch.zeros(0)
        q = quantiles(gaps)
        hi = dist_util.all_reduce([q["gap_abs_p99"], q["w_p99"], -q["w_p01"]], op="max")
        n = max(s["tokens"], 1.0)
        out = {
            "mismatch/logprob_gap_mean": s["gap_sum"] / max(s["gap_tokens"], 1.0),
            "mismatch/logprob_gap_p99": hi[0],
            "mismatch/is_weight_p01": -hi[2],
            "mismatch/is_weight_p99": hi[1],
            "mismatch/truncated_frac": s["truncated"] / n,
            "mismatch/guard_frac": s["guarded"] / n,
        }
        if self.version is not None:
            out["mismatch/fresh_frac"] = s["fresh_tokens"] / n
            out["mismatch/logprob_gap_fresh_mean"] = s["fresh_gap_sum"] / max(s["fresh_tokens"], 1.0)
        return out


def quantiles(gaps: Tensor) -> dict[str, float]:
    """p99 of |gap| and p01 / p99 of the weight exp(gap) over 1-D log-prob gaps (0.0 and
    1.0, 1.0 for no tokens: no correction)."""
    if gaps.numel() == 0:
        return {"gap_abs_p99": 0.0, "w_p01": 1.0, "w_p99": 1.0}
    g = gaps.double()
    lo, hi = torch.quantile(torch.exp(g), torch.tensor([0.01, 0.99], dtype=torch.float64)).tolist()
    return {"gap_abs_p99": float(torch.quantile(g.abs(), 0.99)), "w_p01": lo, "w_p99": hi}

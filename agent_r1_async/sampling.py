"""The behavior policy's sampling distribution: temperature, then top-p (nucleus).

One definition for both sides of the importance ratio: the transformers engine samples from
`process_logits` (vLLM applies the same rule in its own sampler; tests/integration/
test_logprob_fidelity.py checks both engines against it), and the learner differentiates it,
so proximal and current log-probs are of the distribution the behavior policy sampled from
(`engine.temperature`, `engine.top_p`), not of the raw softmax.

The rule, as vLLM v1's sampler applies it (`Sampler.sample`, then
`apply_top_k_top_p_pytorch`): divide the fp32 logits by the temperature; sort the
probabilities in descending order and keep the smallest prefix whose mass reaches top_p, the
token that crosses it included (a token is dropped when the mass strictly before it is
already >= top_p); the top-1 token always survives; dropped tokens get -inf, so a
log_softmax renormalizes over the kept set. vLLM computes the same set from an ascending sort
(drop while the mass from the bottom is <= 1 - top_p): the two differ only by fp32 rounding
at the boundary. Exact logit ties at the boundary are kept or dropped by sort order, here and
in vLLM's PyTorch path (vLLM's Triton GPU kernel keeps all of them); no top-k (the engines
run without it).
"""

from __future__ import annotations

import torch
from torch import Tensor

SORT_CHUNK_ELEMS = 1 << 22
"""Logits sorted at once by `top_p_drop_mask` (~100 MB of sort buffers in fp32 + int64)."""


@torch.no_grad()
def top_p_drop_mask(logits: Tensor, top_p: float) -> Tensor:
    """[..., V] bool, True where top-p drops the token; `logits` already temperature-scaled.

    The sort runs over chunks of rows so its buffers (sorted values, int64 order, probs,
    cumsum: ~5x the chunk) stay bounded however many rows (action tokens) there are.
    """
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    drop = torch.empty(flat.shape, dtype=torch.bool, device=flat.device)
    rows = max(1, SORT_CHUNK_ELEMS // flat.shape[-1])
    for start in range(0, flat.shape[0], rows):
        sorted_logits, order = torch.sort(flat[start : start + rows], dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        dropped = (torch.cumsum(probs, dim=-1) - probs) >= top_p  # mass strictly before
        dropped[:, 0] = False
        drop[start : start + rows].scatter_(-1, order, dropped)
    return drop.reshape(logits.shape)


def process_logits(logits: Tensor, temperature: float, top_p: float) -> Tensor:
    """Temperature then top-p on `[..., V]` logits; dropped tokens get -inf. Returns fp32.

    Differentiable in the kept logits (the kept set itself is a constant of the forward).
    The mask is filled in place into the quotient (a new tensor that the division's backward
    does not keep), so the learner holds one [N, V] copy fewer.
    """
    logits = logits.float() / temperature
    if top_p >= 1.0:
        return logits
    return logits.masked_fill_(top_p_drop_mask(logits, top_p), float("-inf"))

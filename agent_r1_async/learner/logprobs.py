"""Log-probs of sampled action tokens under the distribution the engines sampled from.

`action_logprobs`: temperature, then top-p, exactly as `agent_r1_async.sampling` (the engines'
own processing), so the learner's proximal / current / reference log-probs compare like with
like with the behavior log-probs; plain log_softmax at temperature 1 and top-p 1.
`head_logprobs`: the LM head + that log-softmax over at most `chunk` action tokens at a time,
each chunk recomputed in backward, so a micro-batch's [N, V] logits never exist at once.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from agent_r1_async import sampling
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB


def head_logprobs(head: nn.Module, hidden: Tensor, targets: Tensor, entropy: bool,
                  temperature: float, top_p: float, chunk: int = 0) -> tuple[Tensor, Tensor | None]:
    """`action_logprobs(head(hidden).float(), targets, ...)` over [N, H] hidden states, `chunk`
    rows at a time (`learner.head_chunk_tokens`; 0 = all at once).

    With a 49k vocabulary each fp32 [N, V] copy (logits, log-softmax, its exp) of 2k action
    tokens is 0.4 GB, and autograd keeps several for backward. Chunked, only one chunk's
    logits exist at a time, and with grad enabled each chunk runs under (non-reentrant)
    torch.utils.checkpoint, which keeps just its input: backward recomputes the chunk's head +
    log-softmax, one chunk at a time. Every op is row-wise, so the result equals the unchunked
    one (up to the matmul's blocking). The sampling ops run outside autocast, as fp32.
    """
    n = hidden.shape[0]
    size = chunk if chunk > 0 else max(n, 1)
    recompute = chunk > 0 and torch.is_grad_enabled()
    lps, ents = [], []
    for start in range(0, max(n, 1), size):  # n = 0 (a filler): one empty chunk
        args = (head, hidden[start:start + size], targets[start:start + size], entropy,
                temperature, top_p)
        if recompute:
            lp, ent = checkpoint(_head_chunk, *args, use_reentrant=False)
        else:
            lp, ent = _head_chunk(*args)
        lps.append(lp)
        ents.append(ent)
    if len(lps) == 1:
        return lps[0], ents[0]
    return torch.cat(lps), (torch.cat(ents) if entropy else None)


def _head_chunk(head: nn.Module, hidden: Tensor, targets: Tensor, entropy: bool,
                temperature: float, top_p: float) -> tuple[Tensor, Tensor | None]:
    logits = head(hidden).float()  # [n, V], under the caller's autocast (bf16 matmul)
    with torch.autocast(hidden.device.type, enabled=False):
        return action_logprobs(logits, targets, entropy, temperature, top_p)


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

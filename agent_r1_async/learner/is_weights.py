"""Importance weights after an update: their distribution, and each step's.

The weight of an action token is w = exp(proximal − behavior) (learner/losses.py, before the
loss truncates it at `algorithm.c_max`). After `PolicyTrainer.optimize` every micro-batch holds
the proximal log-probs that step used (`MicroBatch.used_proximal`), so the weights are read
back here without another forward:

- `weight_histogram`: the counts of the batch's action tokens over `WEIGHT_BINS` equal bins of
  [0, c_max] (a weight above c_max counts in the top bin: the loss truncates it there), summed
  over the learner ranks; logged every update as the W&B histogram `is_weight/hist`.
- `step_weights`: the mean, max and min weight of chosen steps (rows), for the episode sample
  (learner/episode_sample.py); a collective too, since a step's tokens are on one rank only.

Both run under no_grad on tensors the update already has; a micro-batch without
`used_proximal` (a trainer that does not set it) is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner.batching import MicroBatch, Row

WEIGHT_BINS = 100
"""Bins of the importance-weight histogram over [0, c_max]."""


def weight_edges(c_max: float) -> list[float]:
    """The histogram's `WEIGHT_BINS` + 1 bin edges, 0 to c_max."""
    return [c_max * i / WEIGHT_BINS for i in range(WEIGHT_BINS + 1)]


def _weights(mb: MicroBatch) -> torch.Tensor | None:
    """[B, T] untruncated weights of the micro-batch (meaningful on its action tokens), on
    the device of its proximal log-probs."""
    if mb.used_proximal is None:
        return None
    prox = mb.used_proximal.detach().float()
    return torch.exp(prox - mb.behavior_logprobs.to(prox.device).float())


@torch.no_grad()
def weight_histogram(mbs: Sequence[MicroBatch], c_max: float) -> list[float]:
    """Action tokens per weight bin over this update's micro-batches, all ranks together."""
    counts = torch.zeros(WEIGHT_BINS, dtype=torch.float64)
    for mb in mbs:
        w = _weights(mb)
        if w is None:
            continue
        values = w[mb.action_mask.to(w.device)].clamp(0.0, c_max)
        counts += torch.histc(values, bins=WEIGHT_BINS, min=0.0, max=c_max).double().cpu()
    return dist_util.all_reduce(counts.tolist())


@torch.no_grad()
def step_weights(rows: Sequence[Row], mbs: Sequence[MicroBatch],
                 wanted: Sequence[int]) -> dict[int, tuple[float, float, float]]:
    """{row index: (mean, max, min) weight over its action tokens} for the `wanted` rows
    (every rank calls it with the same list; a row trained nowhere is left out)."""
    slot = {i: k for k, i in enumerate(wanted)}
    n = len(wanted)
    sums, maxes, neg_mins = [0.0] * 2 * n, [-1.0] * n, [-float("inf")] * n
    for mb in mbs:
        index = mb.row_index.tolist()
        w = _weights(mb) if any(i in slot for i in index) else None
        if w is None:
            continue
        w = w.cpu()
        seqs, ends = mb.value_seq.tolist(), mb.value_index.tolist()
        for v, i in enumerate(index):
            k = slot.get(i)
            if k is None:
                continue
            start = ends[v] + 1  # the step's action follows its last context token
            ws = w[seqs[v], start:start + len(rows[i].action_ids)]
            if ws.numel() == 0:
                continue
            sums[2 * k] += float(ws.sum())
            sums[2 * k + 1] += float(ws.numel())
            maxes[k] = max(maxes[k], float(ws.max()))
            neg_mins[k] = max(neg_mins[k], -float(ws.min()))
    sums = dist_util.all_reduce(sums)
    top = dist_util.all_reduce([*maxes, *neg_mins], op="max")
    out: dict[int, tuple[float, float, float]] = {}
    for i, k in slot.items():
        tokens = sums[2 * k + 1]
        if tokens > 0:
            out[i] = (sums[2 * k] / tokens, top[k], -top[n + k])
    return out

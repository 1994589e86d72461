"""Shared-prefix training: sequences that share a prefix in one row, with a tree attention mask.

The members of a GRPO group share their prompt (system prompt with tool schemas + the task),
and often more. With `learner.shared_prefix` such training sequences (an episode packed into
one under `learner.pack_steps`, else one step each) are laid out as one row

    row = [P] + [suffix_1] + ... + [suffix_n]

where P is the longest common token prefix of the members (compared token by token) and
suffix_i the rest of member i, possibly empty (a member that is a prefix of another, identical
members). The attention mask (`attention_mask`) lets P attend causally to itself and each
suffix_i attend to P and causally to its own earlier tokens, never to another suffix; suffix_i's
position ids continue from len(P). Every token of member i then sees the tokens, at the
positions, it sees in its own flat row, so its hidden state (its log-prob, V(s_t)) is the flat
row's, up to the order of the attention's floating-point sums, while P is computed once instead
of n times; the gradient that reaches P's activations is the sum of what the n flat rows send
theirs, so the parameters' gradient is the flat one too.

Reads: the forward takes the hidden states that predict the action tokens (`TreeBatch.predict_at`)
and the value reads (`TreeBatch.value_at`) as (row, position) pairs of the tree rows. Member i's
flat position j is j inside P and start_i + j − len(P) in its suffix, so the log-prob of
suffix_i's first token is read at P's last position, and a step boundary inside P (shared by
all members) is read once per member, from the same position. Everything after the forward
(log-probs, advantages, masks, the loss, GAE, importance weights, the episode sample) keeps the
members' flat [B, T] layout (`batching.MicroBatch`), so none of it knows about trees.

Planning (`plan_subtrees`): sequences with one key (the RL learner: a group; SFT: the batch) are
sorted by their tokens, which makes members with longer common prefixes neighbours, and joined
greedily into a sub-tree while the joined row costs less than the rows apart and stays within
`learner.micro_batch_tokens`; so a group whose row would exceed the budget is split into
sub-trees, each with its own P. A row's cost counts its attention beside its tokens: under a
mask the attention kernels compute every query-key pair of the row, L² of them where the
suffixes only need P and themselves, so a row of L tokens costs L + ρ·L² token-equivalents,
ρ the FLOPs of one query-key pair over those of one token through the layers' weights
(`attention_cost`; SmolLM2-135M: 3.25e-4). Short suffixes after a long prompt join (8
members, P = 222, 60-token suffixes, as the default arithmetic group: 862 as one row, 2,463
apart); long episodes after a shorter prompt stay apart (4 members, P = 470, 1,000-token
suffixes, as a world group: 10,972 as one row, 8,693 apart). A member alone is its flat row;
members that share no token (P = 0) stay flat rows. Each sub-tree is then one sequence to the
micro-batch planner (batching.py), so no micro-batch exceeds the budget in padded tokens (save
a single sequence over it, as without trees).

Tokens, by hand: 8 members with P = 100 tokens and suffixes of 10..17 tokens make one row of
100 + 108 = 208 tokens; flat rows compute 8 × 100 + 108 = 908.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class SubTree:
    """Training sequences laid out as one row: `prefix` (P) tokens shared, then each member's
    rest. One member: its flat row (P = its whole length)."""

    members: tuple[int, ...]
    """Indices into the planner's sequence list, in row order."""
    prefix: int
    tokens: int
    """Tokens of the row: P + Σ (len_i − P)."""


def flat_subtrees(lengths: Sequence[int]) -> list[SubTree]:
    """One flat row per sequence (`learner.shared_prefix` off)."""
    return [SubTree((i,), n, n) for i, n in enumerate(lengths)]


def attention_cost(hidden_query: int, layers: int, layer_params: int) -> float:
    """ρ: FLOPs of one query-key pair (scores and the weighted sum of values: 4 per query
    dimension per layer) over those of one token through the decoder layers' weights (2 per
    parameter)."""
    return 4 * hidden_query * layers / (2 * layer_params)


def row_cost(tokens: int, rho: float) -> float:
    """A row's cost in token-equivalents: its tokens plus ρ × its L² attention pairs."""
    return tokens + rho * tokens * tokens


def plan_subtrees(seqs: Sequence[Sequence[int]], keys: Sequence[Hashable],
                  max_tokens: int, rho: float = 0.0) -> list[SubTree]:
    """Every sequence in exactly one sub-tree; only sequences with equal keys share one.

    Keys in order of first appearance; within a key the sequences sorted by their tokens
    (ties by index), then joined greedily: member m joins the current sub-tree S (prefix p,
    row L_S = Σ len − (|S| − 1)·p) when the joined prefix q = min(p, common_prefix(last of S,
    m)) makes a row L_J = Σ len + len(m) − |S|·q that costs less than the two apart,
    `row_cost`(L_J) < `row_cost`(L_S) + `row_cost`(len(m)) (with ρ = 0: |S|·q > (|S| − 1)·p),
    and L_J ≤ `max_tokens`.
    """
    if len(seqs) != len(keys):
        raise ValueError(f"plan_subtrees: {len(seqs)} sequences for {len(keys)} keys")
    by_key: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    out: list[SubTree] = []
    for idx in by_key.values():
        order = sorted(idx, key=lambda i: (list(seqs[i]), i))
        members, prefix, total = [order[0]], len(seqs[order[0]]), len(seqs[order[0]])
        for m in order[1:]:
            q = min(prefix, common_prefix(seqs[members[-1]], seqs[m]))
            joined = total + len(seqs[m]) - len(members) * q
            apart = (row_cost(total - (len(members) - 1) * prefix, rho)
                     + row_cost(len(seqs[m]), rho))
            if row_cost(joined, rho) < apart and joined <= max_tokens:
                members.append(m)
                prefix, total = q, total + len(seqs[m])
                continue
            out.append(_subtree(members, prefix, total))
            members, prefix, total = [m], len(seqs[m]), len(seqs[m])
        out.append(_subtree(members, prefix, total))
    return out


def _subtree(members: list[int], prefix: int, total: int) -> SubTree:
    return SubTree(tuple(members), prefix, total - (len(members) - 1) * prefix)


@dataclass
class TreeBatch:
    """The forward's side of a micro-batch of sub-tree rows; [R, L] unless noted."""

    input_ids: Tensor  # long, pad_id on padding
    position_ids: Tensor  # long: P from 0, each suffix from len(P); 0 on padding
    segments: Tensor  # long: 0 on P, k ≥ 1 on the row's k-th member's suffix, -1 on padding
    predict_row: Tensor  # [N] long: the row of the hidden state that predicts each action token
    predict_pos: Tensor  # [N] long: its position (N: the flat action tokens, row-major order)
    value_row: Tensor  # [V] long: the row of each step's last context token (V(s_t))
    value_pos: Tensor  # [V] long: its position (the flat value_index order)
    real_tokens: int
    """Tokens the rows hold without padding: Σ over rows of P + Σ (len_i − P)."""

    @property
    def num_tokens(self) -> int:
        """Padded tokens of the rows."""
        return int(self.input_ids.numel())

    @property
    def predict_at(self) -> tuple[Tensor, Tensor]:
        return self.predict_row, self.predict_pos

    @property
    def value_at(self) -> tuple[Tensor, Tensor]:
        return self.value_row, self.value_pos


def attention_mask(segments: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Additive [R, 1, L, L] mask of `segments` [R, L]: 0 where query q may attend to key k
    (k ≤ q, and k in P or in q's own segment), the dtype's minimum elsewhere.

    Every query sees at least itself, padding included (padding attends to P and earlier
    padding, and no real token attends to padding), so no softmax row is empty. Additive
    rather than boolean: SDPA takes a float mask as it is and autograd keeps that one tensor
    for every layer's backward, where a boolean mask is converted to a float copy in each
    layer's call (measured: torch 2.13 CPU).
    """
    length = segments.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segments.device).tril()
    q, k = segments[:, :, None], segments[:, None, :]
    allowed = causal & ((k == 0) | (k == q))
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segments.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def collate_tree(
    trees: Sequence[SubTree], tokens: Sequence[Sequence[int]], action_mask: Tensor,
    value_seq: Tensor, value_index: Tensor, pad_id: int,
) -> TreeBatch:
    """Sub-trees → their rows and the flat → tree map of reads.

    The flat layout's row b is the b-th member of `trees` taken in order, `tokens[b]` its
    tokens; `action_mask` [B, T], `value_seq` and `value_index` [V] are that layout's.
    """
    sizes = [len(t.members) for t in trees]
    if sum(sizes) != len(tokens):
        raise ValueError(f"collate_tree: {len(tokens)} sequences for {sum(sizes)} members")
    lengths = [t.prefix + sum(len(tokens[b]) - t.prefix for b in _span(sizes, r))
               for r, t in enumerate(trees)]
    shape = (len(trees), max(lengths))
    ids = torch.full(shape, pad_id, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    segments = torch.full(shape, -1, dtype=torch.long)
    member_row, member_prefix, member_start = [], [], []
    for r, t in enumerate(trees):
        members = _span(sizes, r)
        ids[r, :t.prefix] = torch.tensor(list(tokens[members[0]][:t.prefix]), dtype=torch.long)
        positions[r, :t.prefix] = torch.arange(t.prefix)
        segments[r, :t.prefix] = 0
        start = t.prefix
        for k, b in enumerate(members, start=1):
            seq = tokens[b]
            end = start + len(seq) - t.prefix
            ids[r, start:end] = torch.tensor(list(seq[t.prefix:]), dtype=torch.long)
            positions[r, start:end] = torch.arange(t.prefix, len(seq))
            segments[r, start:end] = k
            member_row.append(r)
            member_prefix.append(t.prefix)
            member_start.append(start)
            start = end
    row_of, prefix_of, start_of = (torch.tensor(x, dtype=torch.long)
                                   for x in (member_row, member_prefix, member_start))

    def to_tree(b: Tensor, j: Tensor) -> tuple[Tensor, Tensor]:
        p = prefix_of[b]
        return row_of[b], torch.where(j < p, j, start_of[b] + j - p)

    act_b, act_j = action_mask.nonzero(as_tuple=True)  # row-major: the flat log-probs' order
    predict_row, predict_pos = to_tree(act_b, act_j - 1)  # position j − 1 predicts token j
    value_row, value_pos = to_tree(value_seq, value_index)
    return TreeBatch(input_ids=ids, position_ids=positions, segments=segments,
                     predict_row=predict_row, predict_pos=predict_pos,
                     value_row=value_row, value_pos=value_pos, real_tokens=sum(lengths))


def _span(sizes: Sequence[int], r: int) -> range:
    """Flat rows of the r-th sub-tree's members."""
    start = sum(sizes[:r])
    return range(start, start + sizes[r])

"""Batching: a SampleBatch (groups → episodes → steps) to padded training tensors.

One training row per agent step: input ids = context + action_ids, the context rebuilt whole
from delta records (wire/delta.py). Only the step's own
action tokens are trained (`action_mask`); the context, which holds the instruction, earlier
actions and tool output, is masked. Every per-token tensor is [B, T] and aligned with
`input_ids` positions: `x[b, j]` belongs to token `input_ids[b, j]` (the log-prob of a token
is read from the logits at position j − 1, so position 0 is never an action: contexts are
non-empty by construction).

Advantages are per row (step credit: the step's own advantage; token credit: the episode's
advantage on every step) and broadcast to the row's action tokens. For PPO they are filled in
after the value head has been read (`MicroBatch.set_advantages`).

Step packing (`make_micro_batches(..., pack=True)`): when step t+1's context begins with
step t's context + action (true of every context builder that only appends, like `full`),
the episode's steps share one training sequence — the last step's context + action — with
each step's action tokens marked at their own positions and carrying their own advantage,
behavior log-probs and versions. A causal LM gives every token the same log-prob either way
(its prefix is identical), so the loss and gradient are those of the unpacked rows while an
episode of n steps costs one forward over its final length instead of n overlapping ones.
Steps whose context does not extend the previous one start a new sequence. V(s_t) (PPO's
value head) is read at each step's last context token, also inside a packed sequence: the
hidden state there sees exactly the step's context, so a packed sequence of n steps yields
n values (`value_seq`, `value_index`, `row_index`: one entry per step).

Micro-batches: sequences are sorted by length (longest first) and packed greedily while
padded_length × sequences ≤ `micro_batch_tokens`. A sequence is never split across
micro-batches: a piece of a packed sequence ending at step t would still hold step t's whole
context, so splitting at step boundaries cannot bring it below its last step's length. A
single sequence longer than the budget therefore gets a micro-batch of its own, over the
budget; `launch` refuses a `micro_batch_tokens` below `model.max_model_len`, the longest
sequence (run/preflight/feasibility.py `sequences_fit_micro_batch`), so in a launched run
every micro-batch holds at most `micro_batch_tokens` padded tokens. Padding is on the right
with `pad_id`, and `attention_mask` is 0 there.

Shared prefixes (`learner.shared_prefix`, learner/prefix_tree.py): a group's sequences that
share a prefix are planned as sub-trees, each one row [P] + [suffix_1] + ... with a tree
attention mask, and the micro-batches are planned over those rows. The MicroBatch keeps its
members' flat [B, T] tensors (what the loss and everything after the forward read) and carries
the rows in `tree`, which the forward computes instead; `num_tokens` is then the rows' padded
tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agent_r1_async import returns as ret
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import prefix_tree
from agent_r1_async.learner.prefix_tree import SubTree, TreeBatch
from agent_r1_async.wire import messages
from agent_r1_async.wire.delta import extends, is_delta, resolve_contexts


@dataclass
class Row:
    """One step, ready to be collated. `advantage` may be filled in later (PPO)."""

    context_ids: Sequence[int]
    action_ids: Sequence[int]
    behavior_logprobs: Sequence[float]
    token_versions: Sequence[int]
    advantage: float
    reward: float
    sample_weight: float
    group_index: int
    episode_index: int
    step_index: int
    ids: tuple[str, str]
    """(group_id, episode_id) for logs."""
    extends: bool = False
    """The step arrived as a delta: its context is the previous step's context + action +
    more, known without comparing them (wire/delta.py)."""

    @property
    def length(self) -> int:
        return len(self.context_ids) + len(self.action_ids)


@dataclass
class MicroBatch:
    """Padded tensors of a few rows; [B, T] unless noted."""

    input_ids: Tensor  # long
    attention_mask: Tensor  # long, 0 on padding
    action_mask: Tensor  # bool, True on the step's action tokens
    behavior_logprobs: Tensor  # float32, 0 off the action
    token_versions: Tensor  # long, policy version that sampled each action token
    advantages: Tensor  # float32, the row's advantage on its action tokens, 0 elsewhere
    sample_weights: Tensor  # [B] prioritized-replay importance weight of the row's group
    value_index: Tensor  # [V] long, per step: position of its last context token (V(s_t))
    row_index: Tensor  # [V] long, per step: its index into the row list
    value_seq: Tensor  # [V] long, per step: its sequence (the b of [B, T]); a sequence's steps
    # are consecutive and in step order. Unpacked: V = B and value_seq = 0..B-1.
    proximal_logprobs: Tensor | None = None
    reference_logprobs: Tensor | None = None
    old_values: Tensor | None = None  # [V]
    value_targets: Tensor | None = None  # [V]
    used_proximal: Tensor | None = None
    """The proximal log-probs the last optimizer step used (`PolicyTrainer.optimize`: the
    proximal pass's, or its own detached ones when that pass was skipped): what importance
    weights are read from after the update (learner/is_weights.py)."""
    extra: dict[str, Tensor] = field(default_factory=dict)
    num_rows: int | None = None
    """Steps in this micro-batch (more than B when steps are packed); None = B."""
    tree: TreeBatch | None = None
    """Shared-prefix rows the forward computes instead of `input_ids` (learner/prefix_tree.py);
    None: the flat rows."""

    @property
    def steps(self) -> int:
        return int(self.input_ids.shape[0]) if self.num_rows is None else self.num_rows

    @property
    def num_tokens(self) -> int:
        """Padded tokens the forward computes (the tree rows' when there are some)."""
        return self.tree.num_tokens if self.tree is not None else int(self.input_ids.numel())

    @property
    def flat_tokens(self) -> int:
        """Tokens of the flat rows, padding aside."""
        return int(self.attention_mask.sum())

    @property
    def computed_tokens(self) -> int:
        """Tokens the forward computes, padding aside (`flat_tokens` without a tree)."""
        return self.tree.real_tokens if self.tree is not None else self.flat_tokens

    @property
    def num_action_tokens(self) -> int:
        return int(self.action_mask.sum())

    def set_advantages(self, row_advantages: Tensor) -> None:
        """Per-step advantages [V] (`row_index` order) onto each step's own action tokens: in
        its sequence, those after its last context token and up to the next step's."""
        if row_advantages.shape != self.value_index.shape:
            raise ValueError(f"set_advantages: {tuple(row_advantages.shape)} advantages for "
                             f"{self.value_index.numel()} steps")
        out = torch.zeros(self.input_ids.shape, dtype=torch.float32)
        seq, start = self.value_seq.tolist(), (self.value_index + 1).tolist()
        for v, a in enumerate(row_advantages.tolist()):
            end = start[v + 1] if v + 1 < len(seq) and seq[v + 1] == seq[v] else out.shape[1]
            out[seq[v], start[v]:end] = a
        self.advantages = out * self.action_mask


def _check_step(step: messages.StepRecord, context: Sequence[int]) -> None:
    where = f"episode {step.episode_id!r} step {step.step_index}"
    if not context:
        raise ValueError(f"{where}: empty context_ids (a step must see at least one token)")
    if not step.action_ids:
        raise ValueError(f"{where}: empty action_ids")
    if len(step.behavior_logprobs) != len(step.action_ids):
        raise ValueError(
            f"{where}: {len(step.behavior_logprobs)} behavior_logprobs for "
            f"{len(step.action_ids)} action tokens"
        )
    if step.token_versions and len(step.token_versions) != len(step.action_ids):
        raise ValueError(
            f"{where}: {len(step.token_versions)} token_versions for "
            f"{len(step.action_ids)} action tokens"
        )


def trainable_groups(batch: messages.SampleBatch) -> list[tuple[messages.Group, float]]:
    """Groups with their sampling weight, keeping only trainable episodes with steps."""
    out = []
    for group, weight in zip(batch.groups, batch.is_weights, strict=True):
        eps = [
            e for e in group.episodes
            if e.steps and e.end.status in messages.TRAINABLE_STATUSES
        ]
        if eps:
            out.append((messages.Group(group.group_id, group.task_id, group.env_name, eps), weight))
    return out


def episode_rewards(groups: Sequence[messages.Group]) -> adv.Nested:
    """r_t per step: process rewards plus the outcome on the last step; [group][episode][step]."""
    return [
        [
            ret.step_rewards([s.process_reward for s in sorted_steps(e)], e.end.outcome_reward)
            for e in g.episodes
        ]
        for g in groups
    ]


def sorted_steps(episode: messages.Episode) -> list[messages.StepRecord]:
    return sorted(episode.steps, key=lambda s: s.step_index)


def build_rows(
    groups: Sequence[tuple[messages.Group, float]], advantages: adv.Nested, rewards: adv.Nested
) -> list[Row]:
    """One Row per step, carrying that step's advantage (shapes of `advantages` must match)."""
    rows: list[Row] = []
    for gi, (group, weight) in enumerate(groups):
        for ei, episode in enumerate(group.episodes):
            steps = sorted_steps(episode)
            for si, (step, context) in enumerate(zip(steps, resolve_contexts(steps), strict=True)):
                _check_step(step, context)
                versions = step.token_versions or [step.policy_version] * len(step.action_ids)
                rows.append(Row(
                    context_ids=context,
                    action_ids=step.action_ids,
                    behavior_logprobs=step.behavior_logprobs,
                    token_versions=versions,
                    advantage=advantages[gi][ei][si],
                    reward=rewards[gi][ei][si],
                    sample_weight=weight,
                    group_index=gi,
                    episode_index=ei,
                    step_index=si,
                    ids=(group.group_id, episode.end.episode_id),
                    extends=is_delta(step),
                ))
    return rows


Span = tuple[int, int, dict[str, Sequence[float] | float]]
"""(start, end, per-token field values) of one trained stretch of a sequence; a field's value
is one number per token of the stretch, or one number for all of them."""


def collate_spans(
    seqs: Sequence[tuple[Sequence[int], Sequence[Span]]],
    dtypes: dict[str, torch.dtype],
    pad_id: int,
) -> dict[str, Tensor]:
    """Token sequences with trained spans → right-padded, aligned [B, T] tensors.

    `input_ids`, `attention_mask` (0 on padding), `action_mask` (True inside the spans) and
    one tensor per field of `dtypes`, holding each span's values at its positions, 0
    elsewhere. Shared by RL sequences (one span per packed step) and SFT pairs (one span).
    """
    if not seqs:
        raise ValueError("collate: no rows")
    shape = (len(seqs), max(len(ids) for ids, _ in seqs))
    out = {
        "input_ids": torch.full(shape, pad_id, dtype=torch.long),
        "attention_mask": torch.zeros(shape, dtype=torch.long),
        "action_mask": torch.zeros(shape, dtype=torch.bool),
        **{name: torch.zeros(shape, dtype=dtype) for name, dtype in dtypes.items()},
    }
    for b, (ids, spans) in enumerate(seqs):
        out["input_ids"][b, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        out["attention_mask"][b, : len(ids)] = 1
        for start, end, values in spans:
            out["action_mask"][b, start:end] = True
            for name, v in values.items():
                out[name][b, start:end] = torch.as_tensor(
                    v if isinstance(v, float | int) else list(v), dtype=dtypes[name])
    return out


def collate_pairs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    per_token: dict[str, tuple[Sequence[Sequence[float]], torch.dtype]],
    pad_id: int,
) -> dict[str, Tensor]:
    """(context_ids, action_ids) rows + per-action-token fields → aligned [B, T] tensors (the
    SFT path: each per-token field gives one list per row, of the row's action length)."""
    return collate_spans(
        [([*c, *a], [(len(c), len(c) + len(a), {k: v[i] for k, (v, _) in per_token.items()})])
         for i, (c, a) in enumerate(pairs)],
        {k: dtype for k, (_, dtype) in per_token.items()},
        pad_id,
    )


def collate(rows: Sequence[Row], row_indices: Sequence[int], pad_id: int) -> MicroBatch:
    """Rows → one right-padded MicroBatch, one sequence per row."""
    mb = collate_sequences(rows, [[i] for i in range(len(rows))], pad_id)
    mb.row_index = torch.tensor(list(row_indices), dtype=torch.long)
    return mb


def chain_steps(rows: Sequence[Row]) -> list[list[int]]:
    """Row indices grouped into training sequences: consecutive steps of one episode whose
    context extends the previous step's context + action share a sequence (rows in
    `build_rows` order: group, episode, step)."""
    seqs: list[list[int]] = []
    for i, r in enumerate(rows):
        if seqs:
            prev = rows[seqs[-1][-1]]
            if ((prev.group_index, prev.episode_index) == (r.group_index, r.episode_index)
                    and r.step_index == prev.step_index + 1
                    and (r.extends or extends(r.context_ids, prev.context_ids, prev.action_ids))):
                seqs[-1].append(i)
                continue
        seqs.append([i])
    return seqs


def collate_sequences(rows: Sequence[Row], seqs: Sequence[Sequence[int]], pad_id: int) -> MicroBatch:
    """Sequences of chained rows (indices into `rows`) → one right-padded MicroBatch.

    A sequence's tokens are its last row's context + action; each row's action tokens are
    marked at their own positions with that row's per-token fields and advantage.
    """
    lasts = [rows[s[-1]] for s in seqs]
    t = collate_spans(
        [([*last.context_ids, *last.action_ids],
          [(len(rows[i].context_ids), rows[i].length, {
              "behavior_logprobs": rows[i].behavior_logprobs,
              "token_versions": rows[i].token_versions,
              "advantages": rows[i].advantage,
          }) for i in seq])
         for seq, last in zip(seqs, lasts, strict=True)],
        {"behavior_logprobs": torch.float32, "token_versions": torch.long,
         "advantages": torch.float32},
        pad_id,
    )
    return MicroBatch(
        input_ids=t["input_ids"],
        attention_mask=t["attention_mask"],
        action_mask=t["action_mask"],
        behavior_logprobs=t["behavior_logprobs"],
        token_versions=t["token_versions"],
        advantages=t["advantages"],
        sample_weights=torch.tensor([rows[s[0]].sample_weight for s in seqs], dtype=torch.float32),
        value_index=torch.tensor([len(rows[i].context_ids) - 1 for s in seqs for i in s],
                                 dtype=torch.long),
        row_index=torch.tensor([i for s in seqs for i in s], dtype=torch.long),
        value_seq=torch.tensor([b for b, s in enumerate(seqs) for _ in s], dtype=torch.long),
        num_rows=sum(len(s) for s in seqs),
    )


def plan_micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped into micro-batches: longest first, padded_len × rows ≤ max_tokens (a
    single row longer than max_tokens alone in its own; see the module docstring)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    plan: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted descending, so the first row of a micro-batch sets its padded length.
        if current and lengths[current[0]] * (len(current) + 1) > max_tokens:
            plan.append(current)
            current = []
        current.append(i)
    if current:
        plan.append(current)
    return plan


def training_sequences(rows: Sequence[Row], pack: bool = False) -> list[list[int]]:
    """Row indices per training sequence: chained steps when packing, else one row each."""
    return chain_steps(rows) if pack else [[i] for i in range(len(rows))]


def trained_sequences(rows: Sequence[Row], seqs: Sequence[Sequence[int]]) -> list[list[int]]:
    """`seqs` cut to what carries a gradient when a step of advantage 0 carries none
    (`learner.skip_zero_advantage`): each sequence ends at its last step with a nonzero
    advantage (the zero steps before it are its prefix, computed anyway), and a sequence
    without one is left out."""
    out: list[list[int]] = []
    for seq in seqs:
        keep = max((k + 1 for k, i in enumerate(seq) if rows[i].advantage != 0.0), default=0)
        if keep:
            out.append(list(seq[:keep]))
    return out


def batch_counts(rows: Sequence[Row]) -> tuple[int, int]:
    """(steps, action tokens) of a whole batch: the loss's denominators (`PolicyTrainer.optimize`),
    whichever of its steps the micro-batches hold."""
    return len(rows), sum(len(r.action_ids) for r in rows)


def sequence_tokens(rows: Sequence[Row], seq: Sequence[int]) -> list[int]:
    """A training sequence's tokens: its last row's context + action."""
    last = rows[seq[-1]]
    return [*last.context_ids, *last.action_ids]


def plan_trees(rows: Sequence[Row], seqs: Sequence[Sequence[int]], max_tokens: int,
               shared_prefix: bool = False, rho: float = 0.0) -> list[SubTree]:
    """Training sequences → the rows the forward computes: with `shared_prefix`, sub-trees of
    each group's sequences (learner/prefix_tree.py `plan_subtrees`; `rho`: its attention
    cost), else one per sequence."""
    if not shared_prefix:
        return prefix_tree.flat_subtrees([rows[s[-1]].length for s in seqs])
    return prefix_tree.plan_subtrees([sequence_tokens(rows, s) for s in seqs],
                                     [rows[s[0]].group_index for s in seqs], max_tokens, rho)


def with_tree(mb: MicroBatch, trees: Sequence[SubTree], tokens: Sequence[Sequence[int]],
              pad_id: int) -> MicroBatch:
    """`mb`, the flat rows of `trees`' members in order (`tokens`: theirs), with its tree rows
    when one of `trees` shares a prefix (else the flat rows are what the forward computes)."""
    if any(len(t.members) > 1 for t in trees):
        mb.tree = prefix_tree.collate_tree(trees, tokens, mb.action_mask, mb.value_seq,
                                           mb.value_index, pad_id)
    return mb


def trees_to_micro_batches(rows: Sequence[Row], seqs: Sequence[Sequence[int]],
                           trees: Sequence[SubTree], max_tokens: int,
                           pad_id: int) -> list[MicroBatch]:
    """Sub-trees of training sequences → micro-batches of ≤ max_tokens padded tokens, each
    sub-tree one row (its members' flat rows beside it, see the module docstring)."""
    out = []
    for idx in plan_micro_batches([t.tokens for t in trees], max_tokens):
        members = [seqs[m] for j in idx for m in trees[j].members]
        mb = collate_sequences(rows, members, pad_id)
        chosen = [trees[j] for j in idx]
        if any(len(t.members) > 1 for t in chosen):
            with_tree(mb, chosen, [sequence_tokens(rows, s) for s in members], pad_id)
        out.append(mb)
    return out


def sequences_to_micro_batches(
    rows: Sequence[Row], seqs: Sequence[Sequence[int]], max_tokens: int, pad_id: int,
    shared_prefix: bool = False, rho: float = 0.0,
) -> list[MicroBatch]:
    """Training sequences → micro-batches of ≤ max_tokens padded tokens (`shared_prefix`: a
    group's sequences that share a prefix in one row with a tree mask, where that costs less
    by `rho`, `plan_trees`)."""
    trees = plan_trees(rows, seqs, max_tokens, shared_prefix, rho)
    return trees_to_micro_batches(rows, seqs, trees, max_tokens, pad_id)


def make_micro_batches(
    rows: Sequence[Row], max_tokens: int, pad_id: int, pack: bool = False,
    shared_prefix: bool = False,
) -> list[MicroBatch]:
    """Rows → micro-batches of ≤ max_tokens padded tokens; `pack` chains an episode's steps,
    `shared_prefix` lays a group's sequences out as prefix trees."""
    return sequences_to_micro_batches(rows, training_sequences(rows, pack), max_tokens, pad_id,
                                      shared_prefix)


def filler_micro_batch(pad_id: int) -> MicroBatch:
    """A 2-token micro-batch (one action token) that a rank with fewer micro-batches than the
    others runs with loss weight 0: FSDP's per-layer all-gathers and reduce-scatters are
    collectives, so every rank must run as many forwards and backwards as the busiest one."""
    t = collate_spans([([pad_id, pad_id], [(1, 2, {})])], {}, pad_id)
    zeros = torch.zeros(1, 2)
    return MicroBatch(
        input_ids=t["input_ids"], attention_mask=t["attention_mask"], action_mask=t["action_mask"],
        behavior_logprobs=zeros.clone(), token_versions=torch.zeros(1, 2, dtype=torch.long),
        advantages=zeros.clone(), sample_weights=torch.zeros(1),
        value_index=torch.zeros(1, dtype=torch.long), row_index=torch.zeros(1, dtype=torch.long),
        value_seq=torch.zeros(1, dtype=torch.long), old_values=torch.zeros(1),
        value_targets=torch.zeros(1), num_rows=0,
    )

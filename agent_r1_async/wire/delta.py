"""Delta step records: a step whose context extends the previous step's carries only the
appended tokens.

An episode's contexts usually grow by appending: step t+1 sees step t's context, step t's
action, the turn's closing tokens and the env's answer. Sent whole, an episode of n steps
carries O(n²) context tokens (a 100-step episode is ~50× its final sequence); sent as
deltas it carries each token once.

The form (two `StepRecord` fields, `messages.py`):
- `context_from == -1`: a whole record; `context_ids` is the step's context
  (`context_len` is 0 or its length).
- `context_from == step_index - 1`: a delta; the step's context is the previous step's
  context + action + `context_ids`, `context_len` tokens in all.
A step whose context does not extend the previous one (a window that slid, a rebuilt or
compacted context) is sent whole, and the deltas after it extend it: a new segment.

Who checks what
- The actor (`DeltaEncoder`) sends a delta only after comparing the new context against the
  previous step's context + action token for token.
- The buffer (`buffers/validate.py`, `buffers/assembly.py`) checks the form at ingest and
  that a delta's reference is there and adds up (`reference_problem`): a delta whose
  previous step it does not hold (lost, reordered, from a restarted actor) or whose lengths
  disagree fails its episode, counted by reason. It stores deltas as they came: its memory,
  snapshots and `buffer.max_bytes` accounting are linear in the episode, and the full length
  it checks against `model.max_model_len` is the declared `context_len`, so a delta cannot
  make anything downstream allocate beyond that bound.
- The learner (`learner/batching.py`) rebuilds each step's context (`resolve_contexts`),
  which is exact because every reference was checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_r1_async.wire.messages import StepRecord, TokenIds

WHOLE = -1
"""`context_from` of a record that carries its whole context."""


def extends(context: Sequence[int], prev_context: Sequence[int],
            prev_action: Sequence[int]) -> bool:
    """Does `context` begin with `prev_context` + `prev_action`? (Then it is a delta of them,
    and a learner can train both steps in one sequence.)"""
    n, k = len(prev_context), len(prev_action)
    return (len(context) >= n + k and list(context[:n]) == list(prev_context)
            and list(context[n:n + k]) == list(prev_action))


def is_delta(rec: StepRecord) -> bool:
    return rec.context_from != WHOLE


def context_length(rec: StepRecord) -> int:
    """The number of tokens in the step's whole context, whatever the record's form."""
    return rec.context_len if is_delta(rec) else len(rec.context_ids)


def form_problem(rec: StepRecord) -> str:
    """Why the record's delta fields are malformed by themselves, or ""."""
    if rec.context_from == WHOLE:
        if rec.context_len not in (0, len(rec.context_ids)):
            return (f"context_len {rec.context_len} for a whole context of "
                    f"{len(rec.context_ids)} tokens")
        return ""
    if rec.context_from != rec.step_index - 1 or rec.step_index < 1:
        return f"context_from {rec.context_from} at step_index {rec.step_index}"
    if rec.context_len <= len(rec.context_ids):
        return (f"context_len {rec.context_len} for a delta of {len(rec.context_ids)} tokens "
                "(a delta extends a non-empty step)")
    return ""


def reference_problem(rec: StepRecord, previous: StepRecord | None) -> tuple[str, str]:
    """(reason, detail) of why a delta cannot be rebuilt from `previous` (the episode's step
    at `rec.step_index - 1`, None when the buffer holds none), or ("", "")."""
    if not is_delta(rec):
        return "", ""
    if previous is None:
        return "missing_reference", (f"step {rec.step_index} extends step {rec.context_from}, "
                                     "which this episode does not hold")
    expected = context_length(previous) + len(previous.action_ids) + len(rec.context_ids)
    if rec.context_len != expected:
        return "bad_delta", (f"step {rec.step_index}: context_len {rec.context_len}, but step "
                             f"{previous.step_index}'s context + action + the delta is {expected}")
    return "", ""


class DeltaEncoder:
    """One episode's step contexts as records: each a delta when it extends the previous
    step's context + action, else whole. Call `encode` once per step, in step order."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._context: list[int] = []
        self._action: list[int] = []
        self._index = -1

    def encode(
        self, step_index: int, context: Sequence[int], action: Sequence[int]
    ) -> tuple[TokenIds, int, int]:
        """(`context_ids`, `context_from`, `context_len`) for this step's record."""
        ctx = list(context)
        base = len(self._context) + len(self._action)
        delta = (self.enabled and self._index == step_index - 1 and bool(self._context)
                 and extends(ctx, self._context, self._action))
        out = (TokenIds(ctx[base:]), step_index - 1, len(ctx)) if delta else \
            (TokenIds(ctx), WHOLE, 0)
        self._context, self._action, self._index = ctx, list(action), step_index
        return out


def resolve_contexts(steps: Sequence[StepRecord]) -> list[TokenIds]:
    """Every step's whole context, `steps` being one episode's records in step order.

    Raises ValueError naming the step when a delta's reference is absent or its lengths
    disagree (the buffer refuses such records; this guards anything else that builds
    episodes)."""
    out: list[TokenIds] = []
    for i, rec in enumerate(steps):
        if not is_delta(rec):
            out.append(rec.context_ids)
            continue
        previous = steps[i - 1] if i > 0 and steps[i - 1].step_index == rec.context_from else None
        reason, detail = reference_problem(rec, previous)
        if reason:
            raise ValueError(f"episode {rec.episode_id!r}: {reason}: {detail}")
        assert previous is not None
        whole = TokenIds()
        whole.extend(out[-1])
        whole.extend(previous.action_ids)
        whole.extend(rec.context_ids)
        out.append(whole)
    return out


__all__ = ["WHOLE", "DeltaEncoder", "context_length", "extends", "form_problem", "is_delta",
           "reference_problem", "resolve_contexts"]

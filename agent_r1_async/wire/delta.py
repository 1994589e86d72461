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
  or CRC-32 disagree fails its episode, counted by reason. The CRC chains (CRC-32 continues
  over appended bytes), so checking a delta costs its own tokens, not the whole context's. It stores deltas as they came: its memory,
  snapshots and `buffer.max_bytes` accounting are linear in the episode, and the full length
  it checks against `model.max_model_len` is the declared `context_len`, so a delta cannot
  make anything downstream allocate beyond that bound.
- The learner (`learner/batching.py`) rebuilds each step's context (`resolve_contexts`),
  which is exact because every reference was checked; and it checks again: every record
  carries the CRC-32 of its whole context as the actor saw it (`context_crc`), and a rebuilt
  context whose CRC differs stops the update with the step named. The actor and the learner
  chain it too: a delta's CRC costs its own tokens.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple

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


NO_CRC = -1
"""`context_crc` of a record whose sender computed none (nothing to check)."""


def context_crc(ids: Sequence[int], start: int = 0) -> int:
    """CRC-32 of token ids as little-endian int32 bytes (what `context_crc` carries for a
    whole context), continued from `start` (the CRC of the bytes before them)."""
    return zlib.crc32(ids if isinstance(ids, TokenIds) else TokenIds(ids), start)


class Encoded(NamedTuple):
    """A step's context fields as its record carries them."""

    context_ids: TokenIds
    context_from: int
    context_len: int
    context_crc: int


def is_delta(rec: StepRecord) -> bool:
    return rec.context_from != WHOLE


def context_length(rec: StepRecord) -> int:
    """The number of tokens in the step's whole context, whatever the record's form."""
    return rec.context_len if is_delta(rec) else len(rec.context_ids)


def form_problem(rec: StepRecord) -> str:
    """Why the record's delta fields are malformed by themselves, or ""."""
    if rec.context_crc != NO_CRC and not 0 <= rec.context_crc < 1 << 32:
        return f"context_crc {rec.context_crc} is not a CRC-32 (or {NO_CRC}: none)"
    if rec.context_from == WHOLE:
        if rec.context_len not in (0, len(rec.context_ids)):
            return (f"context_len {rec.context_len} for a whole context of "
                    f"{len(rec.context_ids)} tokens")
        if rec.context_crc != NO_CRC and context_crc(rec.context_ids) != rec.context_crc:
            return "context_crc is not the CRC-32 of the whole context it carries"
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
    if NO_CRC not in (rec.context_crc, previous.context_crc):
        # CRC-32 continues over appended bytes: the whole context's CRC follows from the
        # previous one's, its action and the delta, without rebuilding anything.
        chained = context_crc(rec.context_ids,
                              context_crc(previous.action_ids, previous.context_crc))
        if chained != rec.context_crc:
            return "bad_delta", (f"step {rec.step_index}: context_crc does not follow from step "
                                 f"{previous.step_index}'s context + action + the delta")
    return "", ""


class DeltaEncoder:
    """One episode's step contexts as records: each a delta when it extends the previous
    step's context + action, else whole. Call `encode` once per step, in step order."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._context: list[int] = []
        self._action: list[int] = []
        self._crc = 0
        """CRC-32 of `_context`."""
        self._index = -1

    def encode(self, step_index: int, context: Sequence[int], action: Sequence[int]) -> Encoded:
        """This step's context fields: a delta or the whole context, and its CRC (a delta's
        chained from the previous step's, at the cost of the appended tokens)."""
        ctx = list(context)
        base = len(self._context) + len(self._action)
        delta = (self.enabled and self._index == step_index - 1 and bool(self._context)
                 and extends(ctx, self._context, self._action))
        if delta:
            appended = TokenIds(ctx[base:])
            crc = context_crc(appended, context_crc(self._action, self._crc))
            out = Encoded(appended, step_index - 1, len(ctx), crc)
        else:
            whole = TokenIds(ctx)
            crc = context_crc(whole)
            out = Encoded(whole, WHOLE, 0, crc)
        self._context, self._action, self._crc = ctx, list(action), crc
        self._index = step_index
        return out


def resolve_contexts(steps: Sequence[StepRecord]) -> list[TokenIds]:
    """Every step's whole context, `steps` being one episode's records in step order.

    Raises ValueError naming the step when a delta's reference is absent or its lengths
    disagree (the buffer refuses such records; this guards anything else that builds
    episodes), or when a context's CRC-32 is not the one its record carries."""
    out: list[TokenIds] = []
    # CRC-32 of the context rebuilt last, computed from its tokens (not the record's claim); a
    # delta's continues it over the action and the appended tokens, so checking a rebuilt
    # context costs the delta, not the whole.
    crc = 0
    for i, rec in enumerate(steps):
        if not is_delta(rec):
            whole = rec.context_ids
            crc = context_crc(whole)
        else:
            previous = (steps[i - 1] if i > 0 and steps[i - 1].step_index == rec.context_from
                        else None)
            reason, detail = reference_problem(rec, previous)
            if reason:
                raise ValueError(f"episode {rec.episode_id!r}: {reason}: {detail}")
            assert previous is not None
            whole = TokenIds()
            whole.extend(out[-1])
            whole.extend(previous.action_ids)
            whole.extend(rec.context_ids)
            crc = context_crc(rec.context_ids, context_crc(previous.action_ids, crc))
        if rec.context_crc != NO_CRC and crc != rec.context_crc:
            raise ValueError(f"episode {rec.episode_id!r}: context_mismatch: step "
                             f"{rec.step_index}'s rebuilt context ({len(whole)} tokens) is not "
                             "the one the actor sent (CRC-32 differs)")
        out.append(whole)
    return out


__all__ = ["NO_CRC", "WHOLE", "DeltaEncoder", "Encoded", "context_crc", "context_length",
           "extends", "form_problem", "is_delta", "reference_problem", "resolve_contexts"]

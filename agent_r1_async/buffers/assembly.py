"""Assembly: step records become episodes, episodes become groups (same group_id).

Rules (every dropped or ignored item is counted in `drops` by reason)
- Steps of an episode must be contiguous, step_index 0..n-1. A repeated step_index is
  ignored ("duplicate_step"). An `EpisodeEnd` closes the episode: if its `num_steps` is less
  than a received step_index + 1 the episode is dropped ("step_mismatch"); if steps are
  missing, it waits `step_grace_s` for them, then drops it ("step_mismatch").
- An episode whose status is not trainable (`messages.TRAINABLE_STATUSES`) is dropped from
  its group ("failed_episode"); an episode with no record for `episode_timeout_s` (its actor is
  presumed dead) expires ("expired_episode"). Neither is ever trained half-done.
- A group is ready when all its `group_size` episodes are finalized and at least
  min(min_group_episodes, group_size) of them are trainable. When `group_wait_s` is set, it is
  also ready `group_wait_s` after its first record with at least `min_group_episodes`
  trainable episodes (the stragglers are abandoned, "abandoned_episode"; their later records
  count as "late_record"). Stragglers are the long episodes, so a group wait trades them for
  latency; the default (None) waits while the episodes send records, and an episode silent
  for `episode_timeout_s` expires. A group that cannot reach that is dropped
  ("group_too_small").
- Records for an episode or group already closed count as "late_record".
- Group size: the run has one, `algorithm.group_size`, which the buffer holds once
  (`EpisodeBuffer.group_size`) as the bound. Each `EpisodeEnd` also says its group's size (a
  wire field; actors send `algorithm.group_size`), and the buffer refuses one outside [1, that
  bound] before it gets here (`invalid_record/group_size`, buffers/validate.py). A group
  waits for the size its first end or refused record sets: an end's own (`add`, and `reject`
  when the refused end's size passed its check), else the run's (a refused step, or an end
  refused for its size).
- A delta step (wire/delta.py) needs the episode's previous step: one that arrives without
  it (lost, reordered, from a restarted actor) drops its episode ("missing_reference"), as
  does one whose declared length is not the previous step's context + action + the delta
  ("bad_delta"). Deltas are stored as they came, so an episode's bytes are linear in it.

Memory is accounted with `approx_nbytes`: the in-memory size of the decoded records (Python
int/float objects in lists, ~40 B per token id), not their wire size (~3 B per token id), so
that `buffer.max_bytes` bounds the process memory, not the socket traffic.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agent_r1_async.buffers.lengths import LengthLedger, action_tokens
from agent_r1_async.config import MAX_FAILED_SAMPLE
from agent_r1_async.wire.delta import reference_problem
from agent_r1_async.wire.messages import (
    TRAINABLE_STATUSES,
    Episode,
    EpisodeEnd,
    Group,
    LogProbs,
    StepRecord,
    TokenIds,
)


class OpenEpisode(msgspec.Struct, array_like=True, gc=False):
    """Snapshot form of an episode still being assembled."""

    steps: list[StepRecord]
    end: EpisodeEnd | None = None


class OpenGroup(msgspec.Struct, array_like=True, gc=False):
    """Snapshot form of a group still being assembled."""

    group_id: str
    task_id: str
    env_name: str
    group_size: int
    """0 while unknown (no EpisodeEnd seen yet)."""
    finished: int
    done: list[Episode]
    open: list[OpenEpisode]


SHOWN_FAILURES = frozenset({"env_error", "engine_error", "timeout"})
"""Statuses of the failed episodes kept for episode samples; `aborted` (a stop or a restart
ended the episode, not the agent) is not one."""

_RECORD_OVERHEAD = 400  # struct, strings and list headers of one record
_ARRAY_OVERHEAD = 80  # an array.array object without its items
_BYTES_PER_ID = 40  # 8 B list slot + 32 B int object (ids > 256 are not cached by CPython)
_BYTES_PER_FLOAT = 32  # 8 B list slot + 24 B float object


def _field_nbytes(values: Any, per_item: int) -> int:
    """Packed arrays (what the wire decodes to) hold itemsize bytes a value; lists an object."""
    if isinstance(values, array):
        return _ARRAY_OVERHEAD + values.itemsize * len(values)
    return per_item * len(values)


def approx_nbytes(msg: StepRecord | EpisodeEnd) -> int:
    """Approximate in-memory size of one decoded record."""
    if isinstance(msg, EpisodeEnd):
        return _RECORD_OVERHEAD + 100 * len(msg.metrics) + len(msg.error)
    return (_RECORD_OVERHEAD + _field_nbytes(msg.context_ids, _BYTES_PER_ID)
            + _field_nbytes(msg.action_ids, _BYTES_PER_ID)
            + _field_nbytes(msg.token_versions, _BYTES_PER_ID)
            + _field_nbytes(msg.behavior_logprobs, _BYTES_PER_FLOAT))


def max_episode_nbytes(max_steps: int, max_model_len: int, max_new_tokens: int) -> int:
    """The most `approx_nbytes` counts for one episode as the wire decodes it: `max_steps`
    steps, each a context and action filling `max_model_len` tokens with `max_new_tokens` of
    them actions (ids and log-probs packed; per-token versions, present when an action spans a
    weight update, a list), plus an EpisodeEnd (its metrics and error text left out)."""
    actions = min(max_new_tokens, max_model_len)
    ids, logprobs = TokenIds().itemsize, LogProbs().itemsize
    step = (_RECORD_OVERHEAD + 3 * _ARRAY_OVERHEAD + ids * (max_model_len - actions)
            + (ids + logprobs + _BYTES_PER_ID) * actions)
    return max_steps * step + _RECORD_OVERHEAD


def episode_nbytes(episode: Episode) -> int:
    return approx_nbytes(episode.end) + sum(approx_nbytes(s) for s in episode.steps)


@dataclass
class ReadyGroup:
    group: Group
    nbytes: int


@dataclass
class _Ep:
    group_id: str
    last_seen: float
    steps: dict[int, StepRecord] = field(default_factory=dict)
    end: EpisodeEnd | None = None
    ended_at: float = 0.0
    nbytes: int = 0


@dataclass
class _Grp:
    task_id: str
    env_name: str
    first_seen: float
    last_seen: float = 0.0
    group_size: int = 0
    finished: int = 0
    done: list[Episode] = field(default_factory=list)
    open: dict[str, _Ep] = field(default_factory=dict)
    nbytes: int = 0


class Assembler:
    """Turns a stream of StepRecord / EpisodeEnd into complete groups (see module docstring)."""

    def __init__(
        self,
        group_wait_s: float | None,
        min_group_episodes: int,
        episode_timeout_s: float,
        step_grace_s: float,
        max_steps: int = 0,
    ) -> None:
        """`max_steps`: `env.max_turns` (0: unknown), the top length bucket of `lengths`."""
        self.group_wait_s = group_wait_s
        self.min_group_episodes = min_group_episodes
        self.episode_timeout_s = episode_timeout_s
        self.step_grace_s = step_grace_s
        self.drops: Counter[str] = Counter()
        self.lengths = LengthLedger(max_steps)
        """Episodes generated and dropped here, by length bucket (buffers/lengths.py); the
        buffer adds what it trains and drops as stale."""
        self._groups: dict[str, _Grp] = {}
        self._episodes: dict[str, _Ep] = {}
        self._closed: dict[str, float] = {}  # episode or group id -> closed at (late records)
        self._ready: list[ReadyGroup] = []
        self._dropped: list[str] = []
        self.failed: deque[Episode] = deque(maxlen=MAX_FAILED_SAMPLE)
        """The newest failed episodes (`SHOWN_FAILURES`), kept whole for the learner's
        episode samples (`SampleBatch.failed`): never trained, outside `buffer.max_bytes`
        (at most `MAX_FAILED_SAMPLE` episodes), not in snapshots."""
        self._nbytes = 0
        """The sum of the assembling groups' bytes, kept as they change: every credit grant
        reads it (buffer.py), and a sum over thousands of open groups per grant was a third of
        the service thread's time at 1,000 actors (bench/bench_buffer_scale.py)."""

    @property
    def groups_assembling(self) -> int:
        return len(self._groups)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def _grow(self, grp: _Grp, nbytes: int) -> None:
        grp.nbytes += nbytes
        self._nbytes += nbytes

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def closed(self, group_id: str) -> bool:
        """Whether `group_id` was assembled or dropped lately (its records are late)."""
        return group_id in self._closed

    def drain(self) -> tuple[list[ReadyGroup], list[str]]:
        """Groups that became ready, and ids of groups dropped, since the last call."""
        ready, dropped = self._ready, self._dropped
        self._ready, self._dropped = [], []
        return ready, dropped

    def add(self, msg: StepRecord | EpisodeEnd, now: float) -> bool:
        """Take one record; returns True if it opened a new group."""
        if msg.episode_id in self._closed or msg.group_id in self._closed:
            self.drops["late_record"] += 1
            return False
        grp = self._groups.get(msg.group_id)
        new_group = grp is None
        if grp is None:
            grp = self._groups[msg.group_id] = _Grp(msg.task_id, msg.env_name, now, now)
        ep = grp.open.get(msg.episode_id)
        if ep is None:
            if msg.episode_id in self._episodes:  # same episode id under another group id
                self.drops["inconsistent_record"] += 1
                return new_group
            ep = grp.open[msg.episode_id] = self._episodes[msg.episode_id] = _Ep(msg.group_id, now)
        ep.last_seen = grp.last_seen = now
        nbytes = approx_nbytes(msg)
        if isinstance(msg, StepRecord):
            self._add_step(grp, ep, msg, nbytes)
        else:
            self._add_end(grp, ep, msg, now, nbytes)
        return new_group

    def reject(self, msg: StepRecord | EpisodeEnd, now: float, group_size: int = 0) -> bool:
        """A record of this episode was refused at ingest: the episode can never be whole, so
        it is dropped now ("rejected_episode") instead of holding its group, and the group's
        credit, until `episode_timeout_s`. `group_size`: a trusted size hint (0 = none).
        Returns True if it opened the group (the caller tracks its credit)."""
        if msg.episode_id in self._closed or msg.group_id in self._closed:
            return False
        grp = self._groups.get(msg.group_id)
        new_group = grp is None
        if grp is None:
            grp = self._groups[msg.group_id] = _Grp(msg.task_id, msg.env_name, now, now)
        if grp.group_size == 0 and group_size > 0:
            grp.group_size = group_size
        ep = grp.open.get(msg.episode_id)
        if ep is None:
            if msg.episode_id in self._episodes:  # same episode id under another group id
                self.drops["inconsistent_record"] += 1
                self._check_group(msg.group_id, grp, now)
                return new_group
            ep = grp.open[msg.episode_id] = self._episodes[msg.episode_id] = _Ep(msg.group_id, now)
        ep.last_seen = grp.last_seen = now
        self._finish(grp, ep, msg.episode_id, None, "rejected_episode")
        return new_group

    def _add_step(self, grp: _Grp, ep: _Ep, rec: StepRecord, nbytes: int) -> None:
        if rec.step_index in ep.steps:
            self.drops["duplicate_step"] += 1
            return
        if rec.step_index < 0 or (ep.end is not None and rec.step_index >= ep.end.num_steps):
            self._finish(grp, ep, rec.episode_id, None, "step_mismatch")
            return
        reason, _ = reference_problem(rec, ep.steps.get(rec.step_index - 1))
        if reason:
            self._finish(grp, ep, rec.episode_id, None, reason)
            return
        ep.steps[rec.step_index] = rec
        ep.nbytes += nbytes
        self._grow(grp, nbytes)
        if ep.end is not None and len(ep.steps) == ep.end.num_steps:
            self._complete(grp, ep, rec.episode_id)

    def _add_end(self, grp: _Grp, ep: _Ep, end: EpisodeEnd, now: float, nbytes: int) -> None:
        if ep.end is not None:
            self.drops["duplicate_end"] += 1
            return
        ep.end, ep.ended_at = end, now
        ep.nbytes += nbytes
        self._grow(grp, nbytes)
        if grp.group_size == 0:
            grp.group_size = max(1, end.group_size)
        if end.status not in TRAINABLE_STATUSES:
            if end.status in SHOWN_FAILURES:
                self.failed.append(Episode(steps=[ep.steps[i] for i in sorted(ep.steps)], end=end))
            self._finish(grp, ep, end.episode_id, None, "failed_episode")
        elif end.num_steps <= 0:
            self._finish(grp, ep, end.episode_id, None, "empty_episode")
        elif ep.steps and max(ep.steps) >= end.num_steps:
            self._finish(grp, ep, end.episode_id, None, "step_mismatch")
        elif len(ep.steps) == end.num_steps:
            self._complete(grp, ep, end.episode_id)
        # else: steps still missing; `poll` waits step_grace_s for them.

    def _complete(self, grp: _Grp, ep: _Ep, episode_id: str) -> None:
        assert ep.end is not None
        steps = [ep.steps[i] for i in range(ep.end.num_steps)]  # contiguous by construction
        self._finish(grp, ep, episode_id, Episode(steps=steps, end=ep.end), None)

    def _finish(
        self, grp: _Grp, ep: _Ep, episode_id: str, episode: Episode | None, reason: str | None
    ) -> None:
        """Finalize one episode (kept if `episode`, else dropped for `reason`)."""
        del grp.open[episode_id]
        del self._episodes[episode_id]
        self._closed[episode_id] = ep.last_seen
        grp.finished += 1
        if episode is not None:
            grp.done.append(episode)
        else:
            self._grow(grp, -ep.nbytes)
            self.drops[reason or "dropped_episode"] += 1
            self.lengths.dropped(reason or "dropped_episode", ep.steps.values())
        if ep.end is not None:
            self.lengths.generated(ep.end.num_steps)
        self._check_group(ep.group_id, grp, ep.last_seen)

    def _check_group(self, group_id: str, grp: _Grp, now: float) -> None:
        size, n_done = grp.group_size, len(grp.done)
        all_done = size > 0 and grp.finished >= size
        waited = self.group_wait_s is not None and now - grp.first_seen >= self.group_wait_s
        enough = n_done >= min(self.min_group_episodes, size) if all_done else False
        if enough or (waited and n_done >= self.min_group_episodes):
            self._close(group_id, grp, ready=True)
        elif all_done or (
            not grp.open and (size == 0 or now - grp.last_seen >= self.episode_timeout_s)
        ):
            # Nothing more will come: too few trainable episodes, every episode expired, or
            # the group's other episodes never sent a record (their actor died first).
            self.drops["group_too_small"] += 1
            self._close(group_id, grp, ready=False)

    def _close(self, group_id: str, grp: _Grp, ready: bool,
               open_reason: str = "abandoned_episode") -> None:
        """Close the group; its open episodes (stragglers of a group closed after
        group_wait_s, or a reclaimed group's) are dropped for `open_reason`, and a group that
        is not ready drops its finished episodes too (`lengths`: "group_too_small")."""
        for eid, ep in grp.open.items():
            del self._episodes[eid]
            self._closed[eid] = ep.last_seen
            self.drops[open_reason] += 1
            self.lengths.dropped(open_reason, ep.steps.values())
            if ep.end is not None:  # it ended, but steps are missing
                self.lengths.generated(ep.end.num_steps)
        del self._groups[group_id]
        self._nbytes -= grp.nbytes
        self._closed[group_id] = grp.first_seen
        if ready:
            group = Group(group_id, grp.task_id, grp.env_name, grp.done)
            nbytes = grp.nbytes - sum(ep.nbytes for ep in grp.open.values())
            self._ready.append(ReadyGroup(group, nbytes))
        else:
            for episode in grp.done:
                self.lengths.dropped("group_too_small", episode.steps)
            self._dropped.append(group_id)

    def reclaim(self, group_id: str, now: float) -> int:
        """The group's actor was replaced (it died, or stopped making progress): its open
        episodes are dropped now ("reclaimed_episode") and the group closes as after
        `group_wait_s`: ready with at least `min_group_episodes` episodes done, else dropped
        ("group_too_small"). A group with no record yet is closed too, so that its late records
        count as "late_record". Returns the episodes dropped."""
        grp = self._groups.get(group_id)
        if grp is None:
            self._closed.setdefault(group_id, now)
            return 0
        dropped = len(grp.open)
        ready = len(grp.done) >= self.min_group_episodes
        if not ready:
            self.drops["group_too_small"] += 1
        self._close(group_id, grp, ready, open_reason="reclaimed_episode")
        return dropped

    def progress(self, episode_id: str, group_id: str) -> tuple[int, int] | None:
        """(steps received, their action tokens) of an episode still assembling, open or
        finished in a group not yet closed; None when assembly no longer holds it."""
        ep = self._episodes.get(episode_id)
        if ep is not None:
            return len(ep.steps), action_tokens(ep.steps.values())
        grp = self._groups.get(group_id)
        if grp is None:
            return None
        for done in grp.done:
            if done.end.episode_id == episode_id:
                return len(done.steps), action_tokens(done.steps)
        return None

    def poll(self, now: float) -> None:
        """Apply timeouts: expire silent episodes, give up on missing steps, close waited groups."""
        for gid, grp in list(self._groups.items()):
            for eid, ep in list(grp.open.items()):
                if now - ep.last_seen >= self.episode_timeout_s:
                    self._finish(grp, ep, eid, None, "expired_episode")
                elif ep.end is not None and now - ep.ended_at >= self.step_grace_s:
                    self._finish(grp, ep, eid, None, "step_mismatch")
                if gid not in self._groups:
                    break
            if gid in self._groups:
                self._check_group(gid, grp, now)
        # Forget closed ids after 2 × episode_timeout_s. The dict is in closing order, so this
        # pops from the front and costs O(forgotten), not O(all closed ids).
        horizon = now - 2 * self.episode_timeout_s
        while self._closed:
            key = next(iter(self._closed))
            if self._closed[key] >= horizon:
                break
            del self._closed[key]

    def export(self) -> list[OpenGroup]:
        """Every group still assembling, for a snapshot."""
        return [
            OpenGroup(
                gid,
                g.task_id,
                g.env_name,
                g.group_size,
                g.finished,
                list(g.done),
                [
                    OpenEpisode([e.steps[i] for i in sorted(e.steps)], e.end)
                    for e in g.open.values()
                ],
            )
            for gid, g in self._groups.items()
        ]

    def restore(self, groups: list[OpenGroup], now: float) -> None:
        """Re-open snapshotted groups; their timers restart at `now`."""
        for og in groups:
            grp = self._groups[og.group_id] = _Grp(og.task_id, og.env_name, now, now)
            grp.group_size, grp.finished, grp.done = og.group_size, og.finished, list(og.done)
            for oe in og.open:
                first = oe.steps[0] if oe.steps else oe.end
                if first is None:
                    continue
                ep = _Ep(og.group_id, now, {s.step_index: s for s in oe.steps}, oe.end, now)
                ep.nbytes = sum(approx_nbytes(s) for s in oe.steps)
                ep.nbytes += approx_nbytes(oe.end) if oe.end else 0
                grp.open[first.episode_id] = self._episodes[first.episode_id] = ep
                self._grow(grp, ep.nbytes)
            self._grow(grp, sum(episode_nbytes(e) for e in og.done))

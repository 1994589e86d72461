"""Admission control: how many new groups actors may start, so that no data is born too stale.

An actor may start a group only with a credit from the buffer (admission, not
discard-and-requeue, which starves long episodes). One small object owns the rule; its clock
and learner-version source are injected so tests drive both.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Credit:
    actor_id: str
    granted_at: float
    started: bool = False
    """True once the group's first record arrived (then assembly owns its expiry)."""
    restored: bool = False
    """Restored from a snapshot and not yet claimed by its actor since (`claim`)."""


class AdmissionControl:
    """Credits keep  accepted + in_flight ≤ (max_staleness + learner_version + 1) × batch_groups.

    - accepted: groups completed into the buffer and not discarded untrained, in total
      (restored from a snapshot);
    - in_flight: groups granted and not yet complete (neither accepted nor dropped);
    - the bound counts groups: each learner version consumes about `batch_groups` of them,
      so at most (max_staleness + 1) × batch_groups groups are started and untrained at any
      time, and a stored group, taken before it goes stale (buffers/store.py, "due first"),
      waits at most `max_staleness` versions. With `buffer.max_staleness` 0 no group starts
      before the version that trains it.

    `accepted` is floored at `learner_version × batch_groups` in the formula: a learner at
    version v has trained on v batches, from this buffer or (after a resume) from one before
    it. Without the floor a version jump after a resume would open (jump × batch_groups)
    credits at once, and a learner that reuses groups would build up a credit debt.

    A granted group that never sends a record within `episode_timeout_s` (its actor died or
    never started it) expires and releases its credit. An actor the launcher replaces gives
    back every credit it holds at once (`EpisodeBuffer.reclaim`, with `held_by` and
    `on_dropped`).

    Credits restored from a snapshot are *unclaimed* until their actor says it still runs
    their group (`claim`, from the group ids a CreditRequest lists): the snapshot may predate
    the actor finishing (or losing) the group, and a credit nobody runs would block admission
    until its timeout. `unclaimed(actor_id)` and `unclaimed_since(t)` find the ones to release.
    """

    def __init__(
        self,
        max_staleness: int,
        batch_groups: int,
        version_source: Callable[[], int],
        clock: Callable[[], float],
        episode_timeout_s: float,
    ) -> None:
        if max_staleness < 0 or batch_groups < 1 or episode_timeout_s <= 0:
            raise ValueError(
                f"bad admission settings: max_staleness={max_staleness} (>= 0), "
                f"batch_groups={batch_groups} (>= 1), episode_timeout_s={episode_timeout_s} (> 0)"
            )
        self.max_staleness = max_staleness
        self.batch_groups = batch_groups
        self._version = version_source
        self._clock = clock
        self._timeout = episode_timeout_s
        self.accepted = 0
        self._in_flight: dict[str, _Credit] = {}
        self._prefix = uuid.uuid4().hex[:8]  # group ids never repeat across buffer restarts
        self._counter = itertools.count()
        self.unbudgeted = 0
        """Groups that arrived without a credit (accepted anyway: data is never refused)."""

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def capacity(self) -> int:
        """Groups that may be started now (>= 0)."""
        v = self._version()
        budget = (self.max_staleness + v + 1) * self.batch_groups
        accepted = max(self.accepted, v * self.batch_groups)
        return max(0, budget - accepted - self.in_flight)

    def grant(self, actor_id: str, max_groups: int) -> list[str]:
        """Grant up to `max_groups` credits to `actor_id`; returns the new group ids."""
        n = min(max(0, max_groups), self.capacity())
        now = self._clock()
        ids = [f"{self._prefix}-{next(self._counter)}" for _ in range(n)]
        for gid in ids:
            self._in_flight[gid] = _Credit(actor_id, now)
        return ids

    def holds(self, group_id: str) -> bool:
        """Whether `group_id` holds a credit now (granted or tracked, not yet done)."""
        return group_id in self._in_flight

    def owner(self, group_id: str) -> str | None:
        """The actor `group_id` was granted to, None when it holds no credit."""
        credit = self._in_flight.get(group_id)
        return None if credit is None else credit.actor_id

    def held_by(self, actor_id: str) -> list[str]:
        """The groups whose credits `actor_id` holds (granted, not yet complete)."""
        return [g for g, c in self._in_flight.items() if c.actor_id == actor_id]

    def per_actor(self) -> dict[str, int]:
        """Credits held, by actor (actors holding none are left out)."""
        held: dict[str, int] = {}
        for credit in self._in_flight.values():
            held[credit.actor_id] = held.get(credit.actor_id, 0) + 1
        return held

    def on_record(self, group_id: str, actor_id: str) -> None:
        """A record of `group_id` arrived: its credit is now in use.

        Group ids are minted here alone (`grant`) and actors use them as they are. The buffer
        refuses records of groups that hold no credit (`ungranted`) before they get here; one
        that still arrives is counted in `unbudgeted` and never takes a credit (a foreign
        sender could otherwise fill the admission budget with groups nobody will finish).
        """
        credit = self._in_flight.get(group_id)
        if credit is not None:
            credit.started = True
            return
        self.unbudgeted += 1

    def on_accepted(self, group_id: str) -> None:
        """The group completed into the buffer."""
        self._in_flight.pop(group_id, None)
        self.accepted += 1

    def on_discarded(self) -> None:
        """An accepted group left the buffer without being trained (dropped as stale): it no
        longer counts as accepted, so actors may replace it. Without this, every stale drop
        would shrink the budget for good and a long run would stall."""
        self.accepted = max(0, self.accepted - 1)

    def rewind(self, accepted: int) -> None:
        """The learner went back to an older version (restarted from a checkpoint): at most
        `accepted` groups (trained in its lineage + ready) still count as accepted."""
        self.accepted = max(0, min(self.accepted, accepted))

    def on_dropped(self, group_id: str) -> None:
        """The group was dropped before completing (failed or expired): release its credit."""
        self._in_flight.pop(group_id, None)

    def expire(self) -> list[str]:
        """Release credits granted more than `episode_timeout_s` ago that never sent a record."""
        deadline = self._clock() - self._timeout
        gone = [g for g, c in self._in_flight.items() if not c.started and c.granted_at < deadline]
        for gid in gone:
            del self._in_flight[gid]
        return gone

    def release_all(self) -> int:
        """Release every in-flight credit (their actors are gone); returns how many."""
        n = len(self._in_flight)
        self._in_flight.clear()
        return n

    def state(self) -> tuple[int, list[tuple[str, str, bool]]]:
        """(accepted, [(group_id, actor_id, started)]) for a snapshot."""
        return self.accepted, [(g, c.actor_id, c.started) for g, c in self._in_flight.items()]

    def restore(self, accepted: int, in_flight: list[tuple[str, str, bool]]) -> None:
        """Restore from a snapshot; restored credits get a fresh timeout from now and stay
        unclaimed until their actor claims them."""
        self.accepted = accepted
        now = self._clock()
        self._in_flight = {g: _Credit(a, now, started, restored=True)
                           for g, a, started in in_flight}

    def claim(self, actor_id: str, group_ids: set[str]) -> None:
        """`actor_id` runs these groups: those of its restored credits are claimed."""
        for gid in group_ids:
            credit = self._in_flight.get(gid)
            if credit is not None and credit.actor_id == actor_id:
                credit.restored = False

    def unclaimed(self, actor_id: str) -> list[str]:
        """The restored credits of `actor_id` it has not claimed."""
        return [g for g, c in self._in_flight.items() if c.restored and c.actor_id == actor_id]

    def unclaimed_since(self, before: float) -> list[str]:
        """Restored credits restored before `before` and still unclaimed (by any actor)."""
        return [g for g, c in self._in_flight.items() if c.restored and c.granted_at < before]

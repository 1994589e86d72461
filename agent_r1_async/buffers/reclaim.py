"""Credits given back before their groups complete: released after a restart, reclaimed from a
replaced actor, or orphaned by a relaunch.

Reconciliation after a restart: a CreditRequest lists the groups its actor runs (`held`).
Credits restored from a snapshot that their actor does not list (it finished or lost those
groups while the buffer was down) are released, from `CLAIM_GRACE_S` after the restore (so
records the actor queued while the buffer was down arrive first), and those no actor claims
within `CLAIM_WITHIN_S` are released at a tick (`unclaimed_credit`). The grant names the listed
groups that hold no credit of this actor (`unknown`: never granted here, or dropped), so the
actor stops them at once instead of sending records that would be refused.

A released credit's open episodes are dropped (`reclaimed_episode`) and its group closes as
after `group_wait_s` (ready with `min_group_episodes` done, else dropped); every credit counts
once in `drops[reason]`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable

from agent_r1_async.buffers.admission import AdmissionControl
from agent_r1_async.buffers.assembly import Assembler
from agent_r1_async.buffers.lengths import Loss

log = logging.getLogger(__name__)

CLAIM_GRACE_S = 5.0
"""After a restore, restored credits are released for not being claimed only this late."""
CLAIM_WITHIN_S = 60.0
"""A restored credit no actor claims within this long is released."""
MAX_HELD = 10_000
"""A CreditRequest listing more groups than this is not reconciled (counted)."""


class CreditReturns:
    """Gives credits back now: the buffer's admission and assembly, its drop counts (updated
    in place), `collect` (the buffer's pass that stores or drops closed groups) and clock."""

    def __init__(self, admission: AdmissionControl, assembler: Assembler,
                 drops: Counter[str], collect: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        self.admission, self.assembler, self.drops = admission, assembler, drops
        self._collect, self._clock = collect, clock
        self.restored_at = -math.inf
        """When the buffer was restored from a snapshot (never: -inf)."""

    def release(self, group_ids: list[str], reason: str) -> int:
        """Give back these groups' credits now (module docstring). Returns the episodes
        dropped."""
        now = self._clock()
        episodes = sum(self.assembler.reclaim(gid, now) for gid in group_ids)
        self._collect()  # closed groups: accepted or dropped, their credits released
        for gid in group_ids:
            if self.admission.holds(gid):  # granted, never started
                self.admission.on_dropped(gid)
        self.drops[reason] += len(group_ids)
        if group_ids:
            log.info("released %d credit(s) (%s): %s", len(group_ids), reason,
                     ", ".join(group_ids[:8]))
        return episodes

    def release_unclaimed(self, now: float) -> None:
        """Restored credits no actor claimed within `CLAIM_WITHIN_S` of `now`."""
        unclaimed = self.admission.unclaimed_since(now - CLAIM_WITHIN_S)
        if unclaimed:
            self.release(unclaimed, "unclaimed_credit")

    def reconcile(self, actor_id: str, held: list[str]) -> list[str]:
        """`actor_id` runs the groups `held`: claim its restored credits among them, release
        those it does not run (module docstring); the held groups that hold no credit of
        this actor, which it should stop."""
        if len(held) > MAX_HELD:
            self.drops["invalid_request/held"] += 1
            return []
        claimed = set(held)
        self.admission.claim(actor_id, claimed)
        unclaimed = self.admission.unclaimed(actor_id)
        if unclaimed and self._clock() - self.restored_at >= CLAIM_GRACE_S:
            self.release(unclaimed, "unclaimed_credit")
        return [g for g in held if self.admission.owner(g) != actor_id]

    def orphan_all(self, horizon_s: float) -> None:
        """Every holder of a credit or an open episode is gone: expire the open episodes as
        `horizon_s` from now would, and release every credit (`orphaned_credit`)."""
        self.assembler.poll(self._clock() + horizon_s)
        self._collect()
        self.drops["orphaned_credit"] += self.admission.release_all()

    def reclaim(self, actor_id: str) -> tuple[int, int, Loss]:
        """Every credit `actor_id` holds, back now (`reclaimed_credit`): (credits, episodes
        dropped, what was discarded: the open episodes, and the finished ones of groups
        dropped as too small or stale, with their steps and action tokens)."""
        held = self.admission.held_by(actor_id)
        lengths = self.assembler.lengths
        lengths.journal = []
        try:
            episodes = self.release(held, "reclaimed_credit")
            loss = Loss.from_journal(lengths.journal, lengths.max_steps)
        finally:
            lengths.journal = None
        return len(held), episodes, loss

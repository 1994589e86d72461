"""What a restart from the buffer's last snapshot would discard: the episodes it holds untrained
with a record received since that snapshot.

A restart loses every record received after the snapshot it restores, so such an episode can
never be whole again: all the steps received of it are lost, not only the later ones. Episodes
already trained, dropped or never seen are no loss. `BufferStats.drops` carries the count
under `lengths.WIRE_PREFIX` + `lengths.UNSAVED` (buffers/lengths.py).

Counting it visits every such episode, and every stats request asks for it. With at least
`reuse_from` episodes to visit (2.4 × 10⁵ take about 0.6 s on one core here), a count that took
longer than `cheap_s` is reused for `reuse_factor` times its own cost, so counting takes at most
1 / `reuse_factor` of the service loop however often stats are asked for; the gauge is then up
to that long old. Fewer episodes are counted afresh on every request.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent_r1_async.buffers.assembly import Assembler
from agent_r1_async.buffers.lengths import Loss, action_tokens
from agent_r1_async.buffers.store import GroupStore


class UnsavedEpisodes:
    """Episode id -> group id of each episode with a record accepted since the last snapshot;
    pruned of the episodes the buffer no longer holds untrained."""

    def __init__(self, assembler: Assembler, store: GroupStore,
                 clock: Callable[[], float] = time.monotonic, reuse_from: int = 10_000,
                 cheap_s: float = 0.002, reuse_factor: float = 20.0) -> None:
        self.assembler, self.store = assembler, store
        self._episodes: dict[str, str] = {}
        self._kept = 0
        self._clock, self.reuse_from = clock, reuse_from
        self.cheap_s, self.reuse_factor = cheap_s, reuse_factor
        self._reused: Loss | None = None  # the last costly count, while it may be reused
        self._reuse_until = 0.0

    def add(self, episode_id: str, group_id: str) -> None:
        """A record of `episode_id` was accepted."""
        self._episodes[episode_id] = group_id
        if len(self._episodes) > 2 * self._kept + 1024:
            self._episodes = {e: g for e, g in self._episodes.items()
                              if self.held(e, g) is not None}
            self._kept = len(self._episodes)

    def held(self, episode_id: str, group_id: str) -> tuple[int, int] | None:
        """(steps, action tokens) of an episode the buffer holds untrained: assembling, or in
        a stored group never sampled; None otherwise (trained, dropped, never seen)."""
        got = self.assembler.progress(episode_id, group_id)
        if got is not None:
            return got
        entry = self.store.get(group_id)
        if entry is None or entry.times_sampled:
            return None
        for ep in entry.group.episodes:
            if ep.end.episode_id == episode_id:
                return len(ep.steps), action_tokens(ep.steps)
        return None

    def loss(self) -> Loss:
        """Every episode with a record received since the last snapshot that was not trained,
        at all the steps received of it (a costly count reused a while: module docstring)."""
        if len(self._episodes) < self.reuse_from:
            self._reused = None
            return self._count()
        now = self._clock()
        if self._reused is not None and now < self._reuse_until:
            return self._reused
        t0 = time.perf_counter()
        loss = self._count()
        cost = time.perf_counter() - t0
        self._reused = loss if cost > self.cheap_s else None
        self._reuse_until = now + self.reuse_factor * cost
        return loss

    def _count(self) -> Loss:
        loss, kept = Loss(), {}
        for eid, gid in self._episodes.items():
            got = self.held(eid, gid)
            if got is not None:
                kept[eid] = gid
                loss.add(*got, max_steps=self.assembler.lengths.max_steps)
        self._episodes, self._kept = kept, len(kept)
        return loss

    def saved(self) -> None:
        """A snapshot holds everything received so far."""
        self._episodes, self._kept = {}, 0
        self._reused = None

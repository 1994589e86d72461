"""What a restart from the buffer's last snapshot would discard: the episodes it holds untrained
with a record received since that snapshot.

A restart loses every record received after the snapshot it restores, so such an episode can
never be whole again: all the steps received of it are lost, not only the later ones. Episodes
already trained, dropped or never seen are no loss. `BufferStats.drops` carries the count
under `lengths.WIRE_PREFIX` + `lengths.UNSAVED` (buffers/lengths.py).
"""

from __future__ import annotations

from agent_r1_async.buffers.assembly import Assembler
from agent_r1_async.buffers.lengths import Loss, action_tokens
from agent_r1_async.buffers.store import GroupStore


class UnsavedEpisodes:
    """Episode id -> group id of each episode with a record accepted since the last snapshot;
    pruned of the episodes the buffer no longer holds untrained."""

    def __init__(self, assembler: Assembler, store: GroupStore) -> None:
        self.assembler, self.store = assembler, store
        self._episodes: dict[str, str] = {}
        self._kept = 0

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
        at all the steps received of it."""
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

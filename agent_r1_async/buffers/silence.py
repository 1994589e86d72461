"""Actor silence: how long each actor has shown no progress, on the buffer's listening clock.

`BufferStats.actor_silence_s`, which the launcher judges against `launch.unresponsive_s`: each
ActorStats says how long ago its actor last made progress (`progress_age_s`); the buffer keeps,
per actor, the moment of that progress on its own *listening clock*, which advances only
between ticks and by at most `MAX_TICK_GAP_S` per gap. A buffer whose loop stalls (a stopped
process, a long snapshot) therefore never makes its actors look silent, and a report that
arrives late after such a stall can only move an actor's last progress later, never earlier.
An actor granted a credit before its first report counts from the grant (`start`). A
forgotten actor (`forget`: the launcher replaced it) is judged from its next process's first
report.
"""

from __future__ import annotations

MAX_TICK_GAP_S = 1.0
"""Longest gap between two ticks that counts as listening time (the service ticks every
0.2 s; a longer gap is a stalled loop, which must not age the actors' silence)."""


class ActorSilence:
    """Per actor, its last progress on the listening clock."""

    def __init__(self) -> None:
        self._listened = 0.0
        """Seconds the loop has been listening (its ticks; stalls left out, module docstring)."""
        self._last_tick: float | None = None
        self._progress: dict[str, float] = {}
        """Actor id -> its last progress, on the listening clock."""

    def __contains__(self, actor_id: str) -> bool:
        return actor_id in self._progress

    def __len__(self) -> int:
        return len(self._progress)

    def tick(self, now: float) -> None:
        """The loop ticked at `now`: the gap since the last tick counts, up to `MAX_TICK_GAP_S`."""
        if self._last_tick is not None:
            self._listened += min(max(0.0, now - self._last_tick), MAX_TICK_GAP_S)
        self._last_tick = now

    def report(self, actor_id: str, progress_age_s: float) -> None:
        """An ActorStats: the actor made progress `progress_age_s` ago. Never earlier than
        already known: a report sent during a buffer stall arrives late."""
        seen = self._listened - progress_age_s
        self._progress[actor_id] = max(self._progress.get(actor_id, seen), seen)

    def start(self, actor_id: str) -> None:
        """Judge `actor_id` from now on unless it is judged already (it holds credits)."""
        self._progress.setdefault(actor_id, self._listened)

    def forget(self, actor_id: str) -> None:
        self._progress.pop(actor_id, None)

    def clear(self) -> None:
        self._progress.clear()

    def seconds(self) -> dict[str, float]:
        """Per tracked actor: listening seconds since its last progress."""
        return {a: max(0.0, self._listened - t) for a, t in self._progress.items()}

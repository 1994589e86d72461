"""Which process is unresponsive: alive for Ray, and stuck.

A process can be alive and stuck: stopped (SIGSTOP, a debugger), its event loop blocked in C
code, an engine step that never returns. Ray sees no death then, so each role proves progress
where it does its work:
- an actor through its reports to the buffer, which say when an engine or env call last
  returned (actors/stats.py); the buffer measures the silence in its own listening time
  (buffers/buffer.py), so a stalled buffer never makes its actors look hung; an actor is
  judged from its first report after its loop (re)starts, never while its engine loads;
- the buffer by answering the launcher's stats request, served under its loop's lock;
- each learner rank by answering `progress()` on Ray's second thread, which says what its
  worker thread runs (an update, a checkpoint) and for how long.
`Liveness` alone decides, against `launch.unresponsive_s`; the console says it once per
spell of silence, and again when a buffer or learner answers after it (`judge`). A `Probe`
keeps one Ray call pending to a process: how long it has gone unanswered is its silence.

- An unresponsive actor is replaced (actor_group.py): it costs the in-flight work of one
  actor that would never have finished it.
- An unresponsive buffer or learner is named, and never killed for it: (1) neither loses
  anything by waiting, a stopped one resumes where it stood (0.5 s after SIGCONT in the
  drill), while a restart costs the groups since the last snapshot or the updates since the
  last checkpoint; (2) from outside, stopped and slow look alike: a learner holding the GIL in
  a long C call, or a buffer writing a large snapshot under its lock, does not answer either,
  and a learner in a long update or checkpoint must never be killed; (3) the ones truly gone
  are Ray's deaths, restarted by their supervision, and an operator who knows one is hung
  SIGKILLs it (its pid is in RUN_DIR) and the same path restarts it. A learner rank that
  answers is alive by this measure even when its update never ends (a collective waiting on
  a peer): the update's own bounds end that (`learner.sample_timeout_s` for data, the process
  group's 1,800 s collective timeout, learner/distributed.py), and a rank that then fails is
  a death, restarted as above.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_r1_async.run.output.events import Events

PROBE_EVERY_S = 2.0
"""How often the launcher asks the buffer for its stats (failures, stalls, the actors'
silence) and each learner rank for its progress, while it waits for an update."""


class Liveness:
    """The one place that decides which process is unresponsive (`launch.unresponsive_s`).

    `observe(role, silent_s)` is told, at each look, how long `role` has shown no progress;
    None means nothing is known (an actor with no report since its loop started): the role is
    not judged and what was said of it is forgotten. It returns ("unresponsive", seconds)
    once, when the silence reaches the bound, and ("back", seconds silent) once, when a role
    named so shows progress again; else None. A bound of 0 judges nothing.
    """

    def __init__(self, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound_s, self.clock = bound_s, clock
        self._began: dict[str, float] = {}
        """Roles named unresponsive -> when their silence began."""

    def observe(self, role: str, silent_s: float | None) -> tuple[str, float] | None:
        if silent_s is None or self.bound_s <= 0:
            self.forget(role)
            return None
        now = self.clock()
        began = self._began.get(role)
        if began is None:
            if silent_s < self.bound_s:
                return None
            self._began[role] = now - silent_s
            return "unresponsive", silent_s
        if silent_s >= self.bound_s:
            return None
        del self._began[role]
        return "back", max(0.0, now - silent_s - began)

    def forget(self, role: str) -> None:
        """A role replaced by a new process: what was said of the old one no longer holds."""
        self._began.pop(role, None)


def judge(liveness: Liveness, events: Events, role: str, silent_s: float | None,
          doing: str) -> None:
    """The buffer or a learner rank: said when unresponsive (with what it was `doing`), and
    when it answers again."""
    change = liveness.observe(role, silent_s)
    if change is not None and change[0] == "unresponsive":
        events.unresponsive(role, change[1], doing)
    elif change is not None:
        events.responsive_again(role, change[1])


class Probe:
    """One Ray call to a process kept pending at a time: how long it has gone unanswered is
    that process's silence (`silent_s`); a new call goes out `every_s` after an answer."""

    def __init__(self, ray: Any, call: Callable[[], Any], every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ray, self.call, self.every_s, self.clock = ray, call, every_s, clock
        self.ref: Any = None
        self.sent_at = self.next_at = 0.0

    def poll(self, timeout_s: float = 0.0) -> tuple[bool, Any]:
        """(True, the answer) when one came; (False, None) while none did. An answer that is
        an error (the process died) raises here."""
        now = self.clock()
        if self.ref is None:
            if now < self.next_at:
                return False, None
            self.ref, self.sent_at = self.call(), now
        ready, _ = self.ray.wait([self.ref], timeout=timeout_s)
        if not ready:
            return False, None
        ref, self.ref = self.ref, None
        self.next_at = self.clock() + self.every_s
        return True, self.ray.get(ref)

    def due_now(self) -> None:
        """Ask now (if no call is pending): the caller wants a fresh answer."""
        self.next_at = 0.0

    def silent_s(self) -> float:
        return 0.0 if self.ref is None else self.clock() - self.sent_at

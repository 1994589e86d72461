"""Env failures made visible: logged once per distinct error, counted per kind, streaks tracked.

An env that raises (or times out, or returns the wrong type) ends its episode with a
non-trainable status; before this, the reason lived only in `EpisodeEnd.error` and a run whose
every episode failed went silent. `EnvErrorLog`:

- logs the FIRST occurrence of each distinct error (kind, env method, message) at ERROR on the
  `agent_r1_async.envs.errors` logger, with the env, the method, the task id and the last
  frames of the traceback; later occurrences are only counted (at most `MAX_DISTINCT` distinct
  errors are logged per process, so a message that embeds a task id cannot flood the log);
- counts errors per kind (`counters.env_errors`: the exception type name, "timeout" for a call past
  `env.step_timeout_s`), reported by the actor as `env/errors/<kind>`;
- tracks the failure streak: consecutive ended episodes that failed (not counting "aborted",
  the actor's own stop). The launcher stops a run whose every actor is on a long streak.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field

from agent_r1_async.actors.stats import ActorCounters
from agent_r1_async.wire.messages import TRAINABLE_STATUSES

log = logging.getLogger("agent_r1_async.envs.errors")

MAX_DISTINCT = 32
_TRACE_FRAMES = 4


def short_traceback(exc: BaseException) -> str:
    """The last few frames of `exc`'s traceback (the env's own code is at the bottom)."""
    frames = traceback.extract_tb(exc.__traceback__)[-_TRACE_FRAMES:]
    return "".join(traceback.format_list(frames)).rstrip()


@dataclass
class EnvErrorLog:
    """Writes into the actor's `counters` (env_errors, failed_streak, last_error)."""

    env_name: str
    counters: ActorCounters
    _seen: set[tuple[str, str, str]] = field(default_factory=set)

    def record(self, kind: str, method: str, message: str, task_id: str,
               exc: BaseException | None = None) -> None:
        """One env failure of `method` ("make", "reset", "step", ...)."""
        self.counters.env_errors[kind] += 1
        key = (kind, method, message[:200])
        if key in self._seen or len(self._seen) >= MAX_DISTINCT:
            return
        self._seen.add(key)
        trace = f"\n{short_traceback(exc)}" if exc is not None and exc.__traceback__ else ""
        log.error("env %s: %s failed on task %s: %s: %s (first occurrence; later ones are "
                  "counted as env/errors/%s)%s", self.env_name, method, task_id, kind, message,
                  kind, trace)

    def episode_ended(self, status: str, reason: str, task_id: str) -> None:
        c = self.counters
        if status in TRAINABLE_STATUSES:
            c.failed_streak = 0
        elif status != "aborted":
            c.failed_streak += 1
            c.last_error = f"{status} in env {self.env_name} (task {task_id}): {reason}"

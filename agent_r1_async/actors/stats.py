"""Actor counters and the periodic `ActorStats` report built from them.

Counters only grow; a report turns the growth since the previous report into rates
(tokens/s, episodes/s) and time shares (generation vs environment seconds in the window).
The clock is passed in so tests can drive it.

Each report also says how long ago the actor last made progress (`progress_age_s`): a window
in which an engine or env call returned (tokens, generation or env seconds grew) or an episode
ended, or a report with no episode in flight (an idle actor waits on admission, not on its
own work), moves that moment to the report. Reports come from the actor's loop, so a stopped
process or a blocked event loop sends none; an engine step or env call that never returns
sends reports whose age keeps growing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from agent_r1_async.wire.messages import ActorStats


@dataclass
class ActorCounters:
    """Monotone totals updated by the rollouts of one actor."""

    tokens: int = 0
    """Action tokens generated."""
    episodes_done: int = 0
    episodes_failed: int = 0
    """Episodes that ended with a non-trainable status (env_error, timeout, engine_error, ...)."""
    gen_time_s: float = 0.0
    """Sum over steps of the wall time an episode waited for its action."""
    env_time_s: float = 0.0
    """Sum over steps (and resets) of the wall time an episode waited for its env."""
    in_flight: int = 0
    weight_sync_latency_s: float = 0.0
    """Publish-to-serving latency of the weights in use."""
    env_errors: Counter[str] = field(default_factory=Counter)
    """Env failures per kind (exception type name, "timeout"); see env_errors.py."""
    failed_streak: int = 0
    """Consecutive ended episodes that failed (aborted ones not counted)."""
    last_error: str = ""
    """The most recent failed episode's one-line reason."""
    endpoint_requests: Counter[str] = field(default_factory=Counter)
    """Requests the actor's generation endpoint answered, per status class (`2xx`, `401`,
    `4xx` other than 401, `5xx`; endpoint/server.py)."""
    endpoint_url: str = ""
    """The root URL of the actor's generation endpoint, when it serves one."""


@dataclass
class StatsReporter:
    """Turns counter deltas into `ActorStats` messages."""

    actor_id: str
    counters: ActorCounters
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    _last_t: float = field(default=-1.0, init=False)
    _last: ActorCounters = field(default_factory=ActorCounters, init=False)
    _progress_t: float = field(default=-1.0, init=False)

    def __post_init__(self) -> None:
        self._last_t = self._progress_t = self.clock()

    def report(self, policy_version: int) -> ActorStats:
        now = self.clock()
        dt = max(now - self._last_t, 1e-9)
        c, last = self.counters, self._last
        ended = (c.episodes_done + c.episodes_failed) - (last.episodes_done + last.episodes_failed)
        if ended or c.in_flight == 0 or (c.tokens, c.gen_time_s, c.env_time_s) != (
                last.tokens, last.gen_time_s, last.env_time_s):
            self._progress_t = now
        msg = ActorStats(
            actor_id=self.actor_id,
            time=self.wall_clock(),
            policy_version=policy_version,
            tokens_per_s=(c.tokens - last.tokens) / dt,
            episodes_per_s=ended / dt,
            gen_time_s=c.gen_time_s - last.gen_time_s,
            env_time_s=c.env_time_s - last.env_time_s,
            episodes_in_flight=c.in_flight,
            episodes_done=c.episodes_done,
            episodes_failed=c.episodes_failed,
            weight_sync_latency_s=c.weight_sync_latency_s,
            tokens_total=c.tokens,
            env_errors=dict(c.env_errors),
            failed_streak=c.failed_streak,
            last_error=c.last_error,
            progress_age_s=now - self._progress_t,
            endpoint_requests=dict(c.endpoint_requests),
            endpoint_url=c.endpoint_url,
        )
        self._last_t = now
        self._last = ActorCounters(**{**vars(c), "env_errors": Counter(c.env_errors),
                                      "endpoint_requests": Counter(c.endpoint_requests)})
        return msg

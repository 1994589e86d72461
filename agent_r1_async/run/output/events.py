"""What happened to a run, said once and plainly on the console (run/output/console.py).

The supervisor and the launch loop call `Events` at the moments they see something:

    actor-1 died: killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash); log: RUN_DIR/logs/actor-1.log
    actor-1 unresponsive for 121 s: last report at v14, 2 episodes in flight, 3 credits held; reclaimed 3 credits and 2 unfinished episodes; killing its process for Ray to restart
    buffer unresponsive for 121 s: no answer to the launcher since it was at version 14 (groups: 1 ready, 3 in flight); log: RUN_DIR/logs/buffer.log
    buffer responsive again after 92 s
    actor-1 restarted by Ray (1 of 3 restarts); its loop runs again; discarded in flight: 2 episodes (17 steps: 1 of <=4, 1 of <=16; 1,234 generated tokens)
    actor-1 rejoined at version 7
    checkpoint written: RUN_DIR/checkpoints/step-10
    weights v12 reached 1 of 2 actors (actor-1 serves v8)
    wall-clock limit reached (launch.max_wall_time_s = 1500 s) after 33 updates: stopping
    actor-0: tool nap blocked its event loop for 3.0 s in one synchronous stretch: ...
    no progress for 60 s: every episode refused: the buffer refused 812 records ...
    no progress for 60 s: the learner waits for 2 ready groups; the buffer has 1 ready and 3 in flight (actor-1 holds 3, no progress for 62 s)
    actor-0: its generation endpoint http://127.0.0.1:41877 refused 240 requests in the last 60 s (231 without a valid token, 9 malformed): ...

A dead process's cause is given in one phrase by the supervision that saw the death
(run/processes/forensics.py); these lines only say it.

While the launch waits for an update it calls `Events.watch` with the buffer's stats every
few seconds: new env errors, the env's blocking warnings from the actors' logs (said once per
tool or method; `eval` prints them itself), and, when no group has become ready for
`STALL_S`, which of "actors dead", "every episode refused" (with the first refusal the
buffer logged), "no groups ready" or "learner waiting" (for groups the actors hold) holds
(run/output/watches.py `StallWatch`), said once per stall; and an endpoint that refuses a
sustained stream of requests (`RefusalWatch`: at least `REFUSED_FLOOD` in `REFUSED_WINDOW_S`,
said at most once per actor every `REFUSED_QUIET_S`). Which role is unresponsive is decided by
the launcher's liveness watch (run/processes/liveness.py `Liveness`) and said here
(`unresponsive`, `responsive_again`).
"""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.lengths import Loss
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.lines import first_line
from agent_r1_async.run.output.logs import LogFollower, log_file
from agent_r1_async.run.output.watches import RefusalWatch, StallWatch, first_refusal


def _discarded(loss: Loss | None) -> str:
    """The restart line's tail: what the buffer discarded of the work in flight."""
    return "" if loss is None else f"; discarded in flight: {loss.phrase()}"


@functools.cache
def _blocked() -> re.Pattern[str]:
    """envs/offload.py's warning line; imported on first use: the launch driver's imports
    stay free of the envs' dependencies (jsonschema) until an actor log is read."""
    from agent_r1_async.envs.offload import BLOCKING_WARNING

    return re.compile(r" WARNING agent_r1_async\.envs\.offload: ((.+?) " + BLOCKING_WARNING
                      + r".*)$")


class Events:
    """The run's events (module docstring), each said once through `console.event`."""

    def __init__(self, console: Console, run_dir: Path, num_actors: int, max_staleness: int) -> None:
        self.console = console
        self.run_dir = run_dir
        self.log_dir = run_dir / "logs"
        self.num_actors = num_actors
        self.max_staleness = max(1, max_staleness)
        """`buffer.max_staleness` (at least 1): an actor serving weights more than this many
        versions old has not received them."""
        self._restarted_at: dict[str, tuple[float, int]] = {}
        """actor id -> (wall time of its restart, the learner's version then)."""
        self._version = 0
        self._behind: tuple[str, ...] | None = None
        self._errors: dict[str, set[str]] = {}
        self._followers = {  # what the actors' logs hold already (a resumed run) is old
            a: LogFollower(self.actor_log(a), from_end=True)
            for a in (f"actor-{i}" for i in range(num_actors))}
        self._blocking_said: set[str] = set()
        self.stall = StallWatch()
        self.refusals = RefusalWatch()

    def actor_log(self, actor_id: str) -> Path:
        return log_file(self.log_dir, actor_id)

    def actor_died(self, actor_id: str, cause: str, deaths: int) -> None:
        """An actor's process (or its loop) ended, for `cause` (run/processes/forensics.py, or
        the launcher's own reason when it killed the process)."""
        log = self.actor_log(actor_id)
        self.console.event(f"{actor_id} died: {cause}; log: {log}", key=f"died {actor_id} {deaths}")

    def unresponsive(self, role: str, silent_s: float, doing: str, then: str = "") -> None:
        """`role` showed no progress for `silent_s` (the supervisor decides, once per spell):
        what it was last doing, and what the launcher does about it."""
        self.console.event(f"{role} unresponsive for {silent_s:.0f} s: {doing}"
                           + (f"; {then}" if then else ""),
                           key=f"unresponsive {role} {time.monotonic()}")

    def responsive_again(self, role: str, after_s: float) -> None:
        self.console.event(f"{role} responsive again after {after_s:.0f} s",
                           key=f"responsive {role} {time.monotonic()}")

    def actor_restarted(self, actor_id: str, restarts: int, max_restarts: int,
                        discarded: Loss | None = None) -> None:
        """`discarded`: what the buffer discarded of the old process's work (None: unknown,
        the buffer did not answer)."""
        self._restarted_at[actor_id] = (time.time(), self._version)
        self.console.event(f"{actor_id} restarted by Ray ({restarts} of {max_restarts} restarts); "
                           f"its loop runs again{_discarded(discarded)}",
                           key=f"restarted {actor_id} {restarts}")

    def learner_restarting(self, rank: int, cause: str, world_size: int, source: str,
                           restarts: int, max_restarts: int,
                           discarded: Loss | None = None) -> None:
        """Learner rank `rank` failed for `cause` (run/processes/forensics.py); the group
        restarts from `source`. `discarded`: what the buffer discarded while the actors' loops
        restarted against the new learner (None: unknown)."""
        log = log_file(self.log_dir, "learner", rank)
        self.console.event(f"learner rank {rank} failed: {cause}; log: {log}; "
                           f"restarting the learner group ({world_size} ranks) from {source} "
                           f"({restarts} of {max_restarts} restarts){_discarded(discarded)}",
                           key=f"learner {restarts}")

    def actor_loops_restarted(self, why: str, discarded: Loss | None) -> None:
        """The actors' loops were stopped and re-run (`why`), not for a learner restart."""
        self.console.event(f"the actors' loops restarted ({why}){_discarded(discarded)}")

    def node_lost(self, ip: str, roles: list[str]) -> None:
        ran = ", ".join(roles) if roles else "none of this run's processes"
        then = "; each restarts on a node that has its resources" if roles else ""
        self.console.event(f"node {ip} lost (Ray marks it dead): {ran} ran there{then}",
                           key=f"node {ip}")

    def wall_clock(self, limit_s: float, version: int) -> None:
        self.console.event(f"wall-clock limit reached (launch.max_wall_time_s = {limit_s:.0f} s) "
                           f"after {version} updates: stopping")

    def after_update(self, record: dict[str, Any], buffer: dict[str, Any]) -> None:
        """Events visible in an update's metrics and the buffer's actor reports."""
        version = self._version = int(record.get("version", 0))
        if record.get("learner/checkpoint_saved"):
            self.console.event(f"checkpoint written: {self.run_dir / 'checkpoints' / f'step-{version}'}")
        actors = buffer.get("actors", {})
        self._rejoins(actors)
        self._weights_reach(version, actors)
        self.watch(buffer)

    def watch(self, buffer: dict[str, Any]) -> None:
        """What the buffer's stats and the actors' logs show while the launch waits for an
        update (module docstring): env errors, blocking warnings, a stall and its cause."""
        actors = buffer.get("actors", {})
        self.env_errors(actors)
        self.blocking_warnings(actors)
        for actor_id, line in self.refusals.observe(actors):
            self.console.event(line, key=f"refused {actor_id} {time.monotonic():.0f}")
        found = self.stall.observe(buffer)
        if found is not None:
            cause, text = found
            if cause == "every episode refused":
                first = first_refusal(self.log_dir)
                log = self.log_dir / "buffer.log"
                text += (f"; first refusal: {first}" if first else "") + (
                    f"; log: {log}" if log.exists() else "")
            elif cause == "actors dead":
                text += f"; logs: {self.log_dir}/actor-N.log"
            self.console.event(text, key=f"stall {cause} {time.monotonic():.0f}")

    def blocking_warnings(self, actors: dict[str, Any]) -> None:
        """An env method or tool that blocks its event loop (envs/offload.py warns in the
        actor's log): said once per method or tool name, with the first actor's log."""
        for actor_id in sorted({*actors, *self._followers}):
            follower = self._followers.get(actor_id)
            if follower is None:
                follower = self._followers[actor_id] = LogFollower(self.actor_log(actor_id))
            for line in follower.new_lines():
                found = _blocked().search(line)
                if found is None or found.group(2) in self._blocking_said:
                    continue
                self._blocking_said.add(found.group(2))
                self.console.event(f"{actor_id}: {found.group(1)}; log: {follower.path}",
                                   key=f"blocking {found.group(2)}")

    def _rejoins(self, actors: dict[str, Any]) -> None:
        for actor_id, (since, version) in list(self._restarted_at.items()):
            stats = actors.get(actor_id)
            # A report of the new process, serving the weights published since it started.
            if (stats is not None and float(stats["time"]) > since
                    and int(stats["policy_version"]) >= version):
                del self._restarted_at[actor_id]
                self.console.event(f"{actor_id} rejoined at version {int(stats['policy_version'])}",
                                   key=f"rejoined {actor_id} {since}")

    def _weights_reach(self, version: int, actors: dict[str, Any]) -> None:
        """Say how many actors serve recent weights, the first time all do and whenever the set
        of actors left behind changes (a dead or stuck actor keeps serving old weights)."""
        if version < 1 or not actors:
            return
        behind = tuple(sorted(a for a, s in actors.items()
                              if int(s["policy_version"]) < version - self.max_staleness))
        missing = self.num_actors - len(actors)  # never reported yet
        if behind == self._behind or (self._behind is None and (behind or missing)):
            return
        self._behind = behind
        k = self.num_actors - len(behind) - missing
        serving = ", ".join(f"{a} serves v{int(actors[a]['policy_version'])}" for a in behind)
        self.console.event(f"weights v{version} reached {k} of {self.num_actors} actors"
                           + (f" ({serving})" if serving else ""), key=f"weights {version} {behind}")

    def env_errors(self, actors: dict[str, Any]) -> None:
        """A new kind of env error on an actor (buffer stats' `actors`): one line with its
        latest error and its log (the traceback is there, logged once per kind)."""
        for actor_id, stats in actors.items():
            kinds = set(stats.get("env_errors", {})) - self._errors.setdefault(actor_id, set())
            if kinds:
                self._errors[actor_id] |= kinds
                self.console.error(f"{actor_id}: env error {', '.join(sorted(kinds))}: "
                                   f"{first_line(str(stats.get('last_error', '')), 400)}",
                                   log=self.actor_log(actor_id))

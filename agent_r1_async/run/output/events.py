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

A dead process's cause comes from Ray's death report (its worker exit type and detail: the
memory monitor's OOM kill, a lost connection after a signal, an exception in `__init__`) and
from the process's own log (run/output/logs.py): the exception line of its last traceback.

While the launch waits for an update it calls `Events.watch` with the buffer's stats every
few seconds: new env errors, the env's blocking warnings from the actors' logs (said once per
tool or method; `eval` prints them itself), and, when no group has become ready for
`STALL_S`, which of "actors dead", "every episode refused" (with the first refusal the
buffer logged), "no groups ready" or "learner waiting" (for groups the actors hold) holds
(`StallWatch`), said once per stall; and an endpoint that refuses a sustained stream of
requests (`RefusalWatch`: at least `REFUSED_FLOOD` in `REFUSED_WINDOW_S`, said at most once
per actor every `REFUSED_QUIET_S`). Which role is unresponsive is decided by the supervisor
(run/processes/supervisor.py `Liveness`) and said here (`unresponsive`, `responsive_again`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.lengths import Loss
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.logs import log_file, tail_error

STALL_S = 60.0
"""No group ready (or sampled) and no new learner version for this long, while actors end
episodes or the buffer refuses records: the launch says why it makes no progress."""
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REFUSED = re.compile(r"buffer: record refused(?: \(\d+ so far\))?: (.*)$")


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


REFUSED_FLOOD = 100
REFUSED_WINDOW_S = 60.0
REFUSED_QUIET_S = 300.0


class RefusalWatch:
    """Notices an actor's endpoint refusing a sustained stream of requests (401 and other
    4xx, from the actors' `endpoint_requests` totals); `observe` gives the line to say."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, list[tuple[float, int, int]]] = {}
        self._said: dict[str, float] = {}

    def observe(self, actors: dict[str, Any]) -> list[tuple[str, str]]:
        """(actor id, line) for each actor whose endpoint refused at least `REFUSED_FLOOD`
        requests in the last `REFUSED_WINDOW_S`, not said in the last `REFUSED_QUIET_S`."""
        now, out = self.clock(), []
        for actor_id, stats in actors.items():
            req = stats.get("endpoint_requests") or {}
            n401, n4xx = int(req.get("401", 0)), int(req.get("4xx", 0))
            seen = self._seen.setdefault(actor_id, [])
            if seen and n401 + n4xx < seen[-1][1] + seen[-1][2]:
                seen.clear()  # a restarted actor counts from 0
            seen.append((now, n401, n4xx))
            while len(seen) > 1 and seen[1][0] <= now - REFUSED_WINDOW_S:
                seen.pop(0)
            t0, a0, b0 = seen[0]
            d401, d4xx = n401 - a0, n4xx - b0
            if d401 + d4xx < REFUSED_FLOOD or now - self._said.get(actor_id, -1e18) < REFUSED_QUIET_S:
                continue
            self._said[actor_id] = now
            url = stats.get("endpoint_url") or "(address in its log)"
            out.append((actor_id, (
                f"{actor_id}: its generation endpoint {url} refused {d401 + d4xx} requests in "
                f"the last {max(now - t0, 1.0):.0f} s ({d401} without a valid token, {d4xx} "
                "malformed): something on this machine is calling it (metrics: "
                "endpoint/requests/*)")))
        return out


_FOLLOW_BYTES = 4 << 20
_START_FACTOR = 3
"""Before any actor has reported, a stall is said after this many `STALL_S` (start-up)."""


def worker_exit(pids: list[int], wait_s: float = 3.0) -> str | None:
    """Ray's record of how a worker process ended ("Worker exit type: ... Worker exit detail:
    ..."), from the GCS worker table: the first of `pids` (newest first) that Ray records as
    dead. A process's log names every pid it had (`log_pids`): by the time the launcher sees
    a death Ray may have restarted the actor, whose new pid is alive. None when Ray has no
    record (or its private API moved: a best effort on top of the error the caller has). The
    driver can see the death before the GCS records it: ask again for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while pids:
        try:
            from ray._private.state import state
            from ray.core.generated import common_pb2, gcs_pb2

            dead = {}
            for raw in state._connect_and_get_accessor().get_worker_table():
                w = gcs_pb2.WorkerTableData.FromString(raw)
                if w.pid in pids and not w.is_alive:
                    dead[w.pid] = (f"Worker exit type: {common_pb2.WorkerExitType.Name(w.exit_type)} "
                                   f"Worker exit detail: {w.exit_detail}")
        except Exception:
            return None
        for pid in pids:
            if pid in dead:
                return dead[pid]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.25)
    return None


def log_pids(log: Path, last: int = 3) -> list[int]:
    """The pids in a process's log headers (`===== ... pid N started`), newest first."""
    try:
        found = re.findall(r"^===== .* pid (\d+) started$", log.read_text("utf-8", "replace"), re.M)
    except OSError:
        return []
    return [int(p) for p in reversed(found[-last:])]


def death_cause(error: BaseException, log: Path | None = None, exit_record: str | None = None) -> str:
    """One phrase: why a Ray actor's process ended (OOM, signal, exception), from Ray's error,
    Ray's record of the worker's exit (`worker_exit`) and the process's own log."""
    msg = str(error) + (f"\n{exit_record}" if exit_record else "")
    cause = getattr(error, "cause", None)  # RayTaskError: the exception the method raised
    if cause is not None and not isinstance(cause, type(error)):
        return f"exception: {one_line(cause)}"
    if re.search(r"low on memory|OutOfMemory|OUT_OF_MEMORY|memory monitor", msg, re.I):
        used = re.search(r"was ([\d.]+\s*[GM]B) / ([\d.]+\s*[GM]B)", msg)
        where = f", node memory {used.group(1)} of {used.group(2)}" if used else ""
        return f"out of memory (Ray's memory monitor killed it{where})"
    from_log = tail_error(log) if log is not None else None
    if getattr(error, "actor_init_failed", False):
        return f"exception while starting: {from_log or _first_line(msg)}"
    if log is not None and _fatal_signal(log):
        return f"crashed ({_fatal_signal(log)})"
    if re.search(r"connection error|SIGKILL|unexpectedly exit", msg, re.I):
        return ("killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash"
                + (f"; its log's last exception: {from_log}" if from_log else "") + ")")
    if re.search(r"is unavailable", msg) and not from_log:
        return "its process ended (Ray recorded no reason; see its log)"
    detail = re.search(r"Worker exit detail: ([^\n]+)", msg)
    if from_log:
        return f"exception: {from_log}"
    return _first_line(detail.group(1) if detail else msg) or type(error).__name__


def process_death(error: BaseException, log: Path) -> str:
    """`death_cause` of a process whose own log is `log`, with Ray's record of its exit."""
    return death_cause(error, log, worker_exit(log_pids(log)))


def _fatal_signal(log: Path) -> str | None:
    """'Fatal Python error: Segmentation fault' (faulthandler's report) in the log's tail."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - 16384))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.findall(r"Fatal Python error: ([^\n]+)", tail)
    return found[-1].strip() if found else None


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message` (Ray's errors run to dozens of lines). An exception a
    Ray task raised is told as itself (`TimeoutError: no batch ...`), not as Ray's wrapper
    (`RayTaskError(TimeoutError): ray::LearnerHost.update() (pid=...)`); terminal colour
    codes are dropped. An error class with `full_line` (`checkpoint.NoIntactCheckpoint`)
    wrote its message as one line for the console: it is not cut at 160 characters."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return one_line(cause)
    if getattr(exc, "full_line", False):  # a message written as one line, kept whole
        return f"{type(exc).__name__}: {_first_line(str(exc), 4000)}"
    return f"{type(exc).__name__}: {_first_line(str(exc))}".rstrip(": ")


class LogFollower:
    """The lines appended to a log file since the last call (a rotated file, run/output/logs.py,
    is read again from its start). At most `_FOLLOW_BYTES` are read per call: after a
    larger burst, the older part of it is skipped."""

    def __init__(self, path: Path, from_end: bool = False) -> None:
        """`from_end`: what the file holds already is not new (a resumed run's old log)."""
        self.path = path
        self.offset = 0
        if from_end:
            with contextlib.suppress(OSError):
                self.offset = path.stat().st_size
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
            if size < self.offset:  # rotated: the file started again from empty
                self.offset, self._partial = 0, b""
            if size == self.offset:
                return []
            if size - self.offset > _FOLLOW_BYTES:
                self.offset, self._partial = size - _FOLLOW_BYTES, b""
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return []
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its end
        return [line.decode("utf-8", "replace") for line in lines]


def first_refusal(log_dir: Path) -> str | None:
    """The first record refusal the buffer logged (buffers/buffer.py: the first few and then
    one in a thousand are logged), from RUN_DIR/logs/buffer.log (its rotated copy first)."""
    for path in (log_dir / "buffer.log.1", log_dir / "buffer.log"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    found = _REFUSED.search(line.rstrip("\n"))
                    if found:
                        return _first_line(found.group(1), 240)
        except OSError:
            continue
    return None


class StallWatch:
    """Whether a launch makes no progress, and why, from the buffer's stats alone.

    Progress is a new learner version, or more groups ready or sampled than at the previous
    look. Once there has been none for `stall_s`, `observe` returns (cause, text) for the
    first of these that holds, once per stall:

    - "actors dead": no actor has reported (ActorStats) within `stall_s`;
    - "every episode refused": the buffer refused records meanwhile (`invalid_record/*`);
    - "no groups ready": actors ended episodes meanwhile, and none made a group ready;
    - "learner waiting": the learner's sample request waits (`sample_waiting`) for more groups
      than are ready, and nothing ends: what it waits on is the groups in flight, said with
      the actors that hold them and how long each has made no progress (a hung actor keeps
      its credits until `launch.unresponsive_s`).

    A learner busy with a long update while the actors wait (admission control) is none of
    these: no sample request waits, nothing ends and nothing is refused, and nothing is said.

    `failing` holds (seconds, text) while the stall is "no groups ready" and most of the
    episodes ended since the last progress failed (some may succeed: a server that serves one
    episode of a group of 8 makes every group too small), updated at every look; the
    supervisor stops the run on it after `launch.stop_after_stall_s`.
    """

    def __init__(self, stall_s: float = STALL_S, clock: Any = time.monotonic) -> None:
        self.stall_s, self.clock = stall_s, clock
        self._mark: tuple[int, int] | None = None
        self._since = 0.0
        self._base = (0, 0)  # episodes ended and failed at the last progress
        self._base_drops: dict[str, int] = {}  # the buffer's drops then
        self._said = False
        self.failing: tuple[float, str] | None = None

    def observe(self, buffer: dict[str, Any]) -> tuple[str, str] | None:
        now = self.clock()
        actors: dict[str, Any] = buffer.get("actors", {})
        ended = sum(int(s.get("episodes_done", 0)) + int(s.get("episodes_failed", 0))
                    for s in actors.values())
        failed = sum(int(s.get("episodes_failed", 0)) for s in actors.values())
        drops = buffer.get("drops", {})
        refused = int(drops.get("invalid_record", 0))
        mark = (int(buffer.get("learner_version", 0)),
                int(buffer.get("groups_ready", 0)) + int(buffer.get("sampled_groups", 0)))
        prev, self._mark = self._mark, mark
        if prev is None or mark[0] != prev[0] or mark[1] > prev[1]:
            self._since, self._base, self._said = now, (ended, failed), False
            self._base_drops = {k: int(v) for k, v in drops.items()}
            self.failing = None
            return None
        # An actor restarted by Ray counts from 0 again: its totals are the new baseline.
        self._base = (min(self._base[0], ended), min(self._base[1], failed))
        waited = now - self._since
        d_ended, d_failed = ended - self._base[0], failed - self._base[1]
        d_refused = refused - self._base_drops.get("invalid_record", 0)
        self.failing = None
        if waited >= self.stall_s and 2 * d_failed > d_ended and d_refused == 0 and actors:
            self.failing = (waited, self._no_groups(waited, actors, d_ended, d_failed,
                                                    float(buffer.get("time", time.time()))))
        if self._said or waited < self.stall_s:
            return None
        t = float(buffer.get("time", time.time()))
        seen = {a: t - float(s.get("time", 0.0)) for a, s in actors.items()}  # report ages
        alive = [a for a, age in seen.items() if age < self.stall_s]
        head = f"no progress for {waited:.0f} s"
        if not actors:  # none has reported yet: engines can take minutes to load
            if waited < _START_FACTOR * self.stall_s:
                return None
            self._said = True
            return "actors dead", (f"{head}: actors dead or not started: no actor has reported "
                                   "yet")
        if not alive:
            ages = ", ".join(f"{a} {age:.0f} s ago" for a, age in sorted(seen.items()))
            self._said = True
            return "actors dead", (f"{head}: actors dead: no actor has reported in the last "
                                   f"{self.stall_s:.0f} s (last reports: {ages})")
        if d_refused > 0:
            reasons = ", ".join(
                f"{k.split('/', 1)[1]} {n}" for k, v in sorted(drops.items())
                if k.startswith("invalid_record/")
                and (n := int(v) - self._base_drops.get(k, 0)) > 0)
            self._said = True
            return "every episode refused", (
                f"{head}: every episode refused: the buffer refused {d_refused} records "
                f"({reasons}) and no group became ready")
        if d_ended > 0:
            self._said = True
            return "no groups ready", self._no_groups(waited, actors, d_ended, d_failed, t)
        waiting = int(buffer.get("sample_waiting", 0))
        if waiting > int(buffer.get("groups_ready", 0)):
            self._said = True
            return "learner waiting", f"{head}: {waiting_on(buffer)}"
        return None


    @staticmethod
    def _no_groups(waited: float, actors: dict[str, Any], ended: int, failed: int,
                   t: float) -> str:
        """The "no groups ready" line, with the freshest report's latest failure."""
        newest = max(actors, key=lambda a: float(actors[a].get("time", 0.0)))
        last = str(actors[newest].get("last_error", ""))
        why = f"; latest failure: {_first_line(last, 240)}" if failed and last else ""
        return (f"no progress for {waited:.0f} s: no groups ready: actors ended {ended} "
                f"episodes ({failed} failed{why}) and none made a group ready")


def waiting_on(buffer: dict[str, Any]) -> str:
    """What a learner waiting for data waits on, from the buffer's stats: the groups it asks
    for, the ready ones, and the groups in flight with the actors that hold them."""
    credits = {a: int(n) for a, n in buffer.get("actor_credits", {}).items() if int(n) > 0}
    silence = buffer.get("actor_silence_s", {})
    holders = "; ".join(
        f"{a} holds {n}" + (f", no progress for {float(silence[a]):.0f} s" if a in silence else "")
        for a, n in sorted(credits.items()))
    return (f"the learner waits for {int(buffer.get('sample_waiting', 0))} ready groups; the "
            f"buffer has {int(buffer.get('groups_ready', 0))} ready and "
            f"{int(buffer.get('in_flight_groups', 0))} in flight" + (f" ({holders})" if holders else ""))


class Events:
    """The run's events (module docstring), each said once through `console.event`."""

    def __init__(self, console: Console, run_dir: Path, num_actors: int, max_staleness: int) -> None:
        self.console = console
        self.run_dir = run_dir
        self.log_dir = run_dir / "logs"
        self.num_actors = num_actors
        self.lag = max(1, max_staleness)
        """An actor serving weights more than this many versions old has not received them."""
        self._restarted_at: dict[str, tuple[float, int]] = {}
        """actor id -> (wall time of its restart, the learner's version then)."""
        self._version = 0
        self._lagging: tuple[str, ...] | None = None
        self._errors: dict[str, set[str]] = {}
        self._followers = {  # what the actors' logs hold already (a resumed run) is old
            a: LogFollower(self.actor_log(a), from_end=True)
            for a in (f"actor-{i}" for i in range(num_actors))}
        self._blocking_said: set[str] = set()
        self.stall = StallWatch()
        self.refusals = RefusalWatch()

    def actor_log(self, actor_id: str) -> Path:
        return log_file(self.log_dir, actor_id)

    def actor_died(self, actor_id: str, error: BaseException, deaths: int,
                   cause: str | None = None) -> str:
        """An actor's process (or its loop) ended; returns the cause it said. `cause`: known
        already (the launcher killed it), instead of Ray's record and the log's."""
        log = self.actor_log(actor_id)
        cause = cause or process_death(error, log)
        self.console.event(f"{actor_id} died: {cause}; log: {log}", key=f"died {actor_id} {deaths}")
        return cause

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

    def learner_restarting(self, rank: int, error: BaseException, world_size: int, source: str,
                           restarts: int, max_restarts: int,
                           discarded: Loss | None = None) -> None:
        """`discarded`: what the buffer discarded while the actors' loops restarted against
        the new learner (None: unknown)."""
        log = log_file(self.log_dir, "learner", rank)
        cause = process_death(error, log)
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
                              if int(s["policy_version"]) < version - self.lag))
        missing = self.num_actors - len(actors)  # never reported yet
        if behind == self._lagging or (self._lagging is None and (behind or missing)):
            return
        self._lagging = behind
        k = self.num_actors - len(behind) - missing
        lag = ", ".join(f"{a} serves v{int(actors[a]['policy_version'])}" for a in behind)
        self.console.event(f"weights v{version} reached {k} of {self.num_actors} actors"
                           + (f" ({lag})" if lag else ""), key=f"weights {version} {behind}")

    def env_errors(self, actors: dict[str, Any]) -> None:
        """A new kind of env error on an actor (buffer stats' `actors`): one line with its
        latest error and its log (the traceback is there, logged once per kind)."""
        for actor_id, stats in actors.items():
            kinds = set(stats.get("env_errors", {})) - self._errors.setdefault(actor_id, set())
            if kinds:
                self._errors[actor_id] |= kinds
                self.console.error(f"{actor_id}: env error {', '.join(sorted(kinds))}: "
                                   f"{_first_line(str(stats.get('last_error', '')), 400)}",
                                   log=self.actor_log(actor_id))

"""What happened to a run, said once and plainly on the console (run/console.py).

The supervisor and the launch loop call `Events` at the moments they see something:

    actor-1 died: killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash); log: RUN_DIR/logs/actor-1.log
    actor-1 restarted by Ray (1 of 3 restarts); its loop runs again
    actor-1 rejoined at version 7
    checkpoint written: RUN_DIR/checkpoints/step-10
    weights v12 reached 1 of 2 actors (actor-1 serves v8)
    wall-clock limit reached (launch.max_wall_time_s = 1500 s) after 33 updates: stopping

A dead process's cause comes from Ray's death report (its worker exit type and detail: the
memory monitor's OOM kill, a lost connection after a signal, an exception in `__init__`) and
from the process's own log (run/logs.py): the exception line of its last traceback.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from agent_r1_async.run.console import Console
from agent_r1_async.run.logs import log_file, tail_error


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
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message` (Ray's errors run to dozens of lines)."""
    return f"{type(exc).__name__}: {_first_line(str(exc))}".rstrip(": ")


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

    def actor_log(self, actor_id: str) -> Path:
        return log_file(self.log_dir, actor_id)

    def actor_died(self, actor_id: str, error: BaseException, deaths: int) -> str:
        """An actor's process (or its loop) ended; returns the cause it said."""
        log = self.actor_log(actor_id)
        cause = process_death(error, log)
        self.console.event(f"{actor_id} died: {cause}; log: {log}", key=f"died {actor_id} {deaths}")
        return cause

    def actor_restarted(self, actor_id: str, restarts: int, max_restarts: int) -> None:
        self._restarted_at[actor_id] = (time.time(), self._version)
        self.console.event(f"{actor_id} restarted by Ray ({restarts} of {max_restarts} restarts); "
                           "its loop runs again", key=f"restarted {actor_id} {restarts}")

    def learner_restarting(self, rank: int, error: BaseException, world_size: int, source: str,
                           restarts: int, max_restarts: int) -> None:
        log = log_file(self.log_dir, "learner", rank)
        cause = process_death(error, log)
        self.console.event(f"learner rank {rank} failed: {cause}; log: {log}; "
                           f"restarting the learner group ({world_size} ranks) from {source} "
                           f"({restarts} of {max_restarts} restarts)", key=f"learner {restarts}")

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
        self.env_errors(actors)

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
                                   f"{_first_line(str(stats.get('last_error', '')))}",
                                   log=self.actor_log(actor_id))

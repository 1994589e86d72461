"""Why a Ray actor's process ended, in one phrase: Ray's error, Ray's record of the worker's
exit and the process's own log.

A dead process's cause comes from Ray's death report (its worker exit type and detail: the
memory monitor's OOM kill, a lost connection after a signal, an exception in `__init__`),
from Ray's worker table (`worker_exit`: its private GCS API, read for the record a
restartable actor's error lacks) and from the process's own log (run/output/logs.py): the
exception line of its last traceback, or faulthandler's fatal-signal report. The launch's
event lines (run/output/events.py) say the phrase.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from agent_r1_async.run.output.lines import first_line, one_line
from agent_r1_async.run.output.logs import tail_error


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
        return f"exception while starting: {from_log or first_line(msg)}"
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
    return first_line(detail.group(1) if detail else msg) or type(error).__name__


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

"""Run events (run/output/events.py) and per-process logs (run/output/logs.py): a dead process's cause from
Ray's report and its own log, events said once, rotation of a log that grew too big."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from ray.exceptions import RayActorError, RayTaskError

from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events, death_cause, log_pids
from agent_r1_async.run.output.logs import bound, tail_error

ROOT = Path(__file__).resolve().parents[2]

# Ray 2.60's texts for an actor whose worker was SIGKILLed, and one its memory monitor killed.
_SIGKILL = ("The actor died unexpectedly before finishing this task.\n\tclass_name: ActorHost\n"
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
            "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
            "file. There are some potential root causes. (1) The process is killed by SIGKILL by "
            "OOM killer due to high memory usage. (2) ray stop --force is called.")
_RAY_OOM = ("The actor died unexpectedly before finishing this task.\n"
            "The actor is dead because its worker process has died. Worker exit type: "
            "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
            "memory.\nMemory on the node (IP: 10.0.0.5, ID: ab12) where the task (actor ID: cd34) "
            "was running was 21.50GB / 22.89GB (0.939), which exceeds the memory usage threshold")


def test_death_cause_names_oom_signal_and_exception(tmp_path: Path) -> None:
    log = tmp_path / "actor-0.log"
    log.write_text("starting\n")
    assert death_cause(RayActorError(error_msg=_RAY_OOM), log) == (
        "out of memory (Ray's memory monitor killed it, node memory 21.50GB of 22.89GB)")
    assert death_cause(RayActorError(error_msg=_SIGKILL), log).startswith(
        "killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash)")
    log.write_text("ok\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1:\n")
    assert death_cause(RayActorError(error_msg=_SIGKILL), log) == "crashed (Segmentation fault)"
    # The actor's loop raised: Ray hands back the exception itself.
    err = RayTaskError("run", "Traceback ...", ValueError("env exploded\nmore"))
    assert death_cause(err, log) == "exception: ValueError: env exploded"
    # Died in __init__: the last exception of its own log.
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                   "    boom()\nMemoryError: cannot allocate\n")
    init = RayActorError(error_msg="The actor died because of an error raised in its creation task",
                         actor_init_failed=True)
    assert death_cause(init, log) == "exception while starting: MemoryError: cannot allocate"


def test_a_restartable_actor_s_death_is_told_by_ray_s_worker_record(tmp_path: Path) -> None:
    """A restartable actor's pending call fails with "unavailable" (no cause in it); the cause
    is in Ray's worker table, found by the pids of the log's headers."""
    log = tmp_path / "actor-0.log"
    log.write_text("===== 2026-11-23 22:00:00 actor-0 pid 41 started\nok\n"
                   "===== 2026-11-23 22:01:00 actor-0 pid 4242 started\nserving v3\n")
    assert log_pids(log) == [4242, 41]  # newest first: Ray may have restarted it already
    unavailable = RayActorError(error_msg="The actor ab is unavailable: RpcError: Socket closed")
    record = "Worker exit type: SYSTEM_ERROR " + _SIGKILL.split("Worker exit detail: ")[1]
    assert death_cause(unavailable, log, record).startswith("killed by a signal (SIGKILL")
    oom = "Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: " + _RAY_OOM.split(
        "Worker exit detail: ")[1]
    assert death_cause(unavailable, log, oom).startswith("out of memory (Ray's memory monitor")
    assert death_cause(unavailable, log) == (
        "its process ended (Ray recorded no reason; see its log)")


def test_tail_error_reads_the_last_traceback(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Traceback (most recent call last):\n  File \"a\"\nKeyError: 'a'\nlater\n"
                   "Traceback (most recent call last):\n  File \"b\"\n    x()\n"
                   "RuntimeError: second\n")
    assert tail_error(log) == "RuntimeError: second"
    log.write_text("no traceback here\n")
    assert tail_error(log) is None
    assert tail_error(tmp_path / "missing.log") is None


def _stats(version: int, t: float, **kw) -> dict:
    return {"policy_version": version, "time": t, **kw}


def test_events_after_updates_are_said_once(tmp_path: Path) -> None:
    out = io.StringIO()
    events = Events(Console(tmp_path / "logs", live=False, stream=out), tmp_path, 2, max_staleness=2)
    events.after_update({"version": 1}, {"actors": {"actor-0": _stats(0, 10.0)}})  # one reported
    events.after_update({"version": 2}, {"actors": {"actor-0": _stats(1, 11.0),
                                                    "actor-1": _stats(1, 11.0)}})
    events.after_update({"version": 3}, {"actors": {"actor-0": _stats(2, 12.0),
                                                    "actor-1": _stats(2, 12.0)}})  # no change
    events.after_update({"version": 10, "learner/checkpoint_saved": 1.0},
                        {"actors": {"actor-0": _stats(9, 13.0), "actor-1": _stats(2, 12.0)}})
    events.actor_restarted("actor-1", 1, 3)
    events.after_update({"version": 11}, {"actors": {"actor-0": _stats(10, 9e12),
                                                     "actor-1": _stats(10, 9e12)}})
    lines = out.getvalue().splitlines()
    assert lines == [
        "[launch] weights v2 reached 2 of 2 actors",
        f"[launch] checkpoint written: {tmp_path / 'checkpoints' / 'step-10'}",
        "[launch] weights v10 reached 1 of 2 actors (actor-1 serves v2)",  # 2 < 10 - 2
        "[launch] actor-1 restarted by Ray (1 of 3 restarts); its loop runs again",
        "[launch] actor-1 rejoined at version 10",
        "[launch] weights v11 reached 2 of 2 actors",
    ]


def test_env_errors_reach_the_console_in_one_line_with_the_log(tmp_path: Path, capsys) -> None:
    events = Events(Console(tmp_path / "logs", live=False, stream=io.StringIO()), tmp_path, 1, 1)
    stats = _stats(0, 1.0, env_errors={"ValueError": 2}, last_error="arithmetic task 3: bad\nx")
    events.after_update({"version": 0}, {"actors": {"actor-0": stats}})
    events.after_update({"version": 0}, {"actors": {"actor-0": stats}})  # same kind: not again
    err = capsys.readouterr().err.splitlines()
    assert err == [f"[launch] error: actor-0: env error ValueError: arithmetic task 3: bad "
                   f"(full log: {tmp_path / 'logs' / 'actor-0.log'})"]


def test_redirect_output_catches_prints_warnings_logging_and_children(tmp_path: Path) -> None:
    script = (
        "import logging, os, sys, warnings\n"
        "from agent_r1_async.run.output.logs import redirect_output\n"
        f"redirect_output({str(tmp_path / 'logs' / 'actor-0.log')!r})\n"
        "print('a print'); warnings.warn('a warning', FutureWarning)\n"
        "logging.getLogger('vllm').info('an info record')\n"
        "os.write(2, b'raw fd 2\\n'); os.system('echo from a child process')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""  # nothing on the console
    text = (tmp_path / "logs" / "actor-0.log").read_text()
    for piece in ("actor-0 pid ", "a print", "FutureWarning: a warning", "INFO vllm: an info record",
                  "raw fd 2", "from a child process"):
        assert piece in text, piece


def test_bound_rotates_a_log_past_its_size_and_writers_continue(tmp_path: Path) -> None:
    path = tmp_path / "learner-0.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"x" * 100)
    assert not bound(path, max_bytes=100)
    os.write(fd, b"y")
    assert bound(path, max_bytes=100)
    os.write(fd, b"after\n")  # O_APPEND: lands at the new end, offset 0
    os.close(fd)
    assert path.read_bytes() == b"after\n"
    assert (tmp_path / "learner-0.log.1").read_bytes() == b"x" * 100 + b"y"

"""Why a Ray actor's process ended (run/processes/forensics.py): OOM, a signal, an exception,
from Ray's error, Ray's worker record and the process's own log."""

from __future__ import annotations

from pathlib import Path

import ray.exceptions as rex
from ray.exceptions import RayActorError, RayTaskError

from agent_r1_async.run.processes.forensics import death_cause, log_pids
from tests.unit.run.processes.ray_fakes import OOM, SIGKILLED, died


def test_the_buffer_and_the_learner_share_one_cause_of_death():
    """The buffer's restart line says why in the same words as the learner's and the actors'
    (`death_cause`; the buffer once had its own, terser, copy)."""
    assert death_cause(rex.OutOfMemoryError(OOM)) == (
        "out of memory (Ray's memory monitor killed it, node memory 22.5GB of 23.4GB)")
    assert death_cause(died(SIGKILLED)) == (
        "killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash)")
    assert death_cause(died("killed by the memory monitor")) == (
        "out of memory (Ray's memory monitor killed it)")
    assert death_cause(rex.ActorUnavailableError("restarting", None)) == (
        "its process ended (Ray recorded no reason; see its log)")


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

"""Run events (run/output/events.py) and per-process logs (run/output/logs.py).

A dead process's cause from Ray's report and its own log, events said once, rotation of a log
that grew too big.

A launch that cannot make progress says why: which of "actors dead", "every episode refused"
(with the first refusal the buffer logged) or "no groups ready" holds, once per stall; an env's
blocking warning reaches the console from the actor's log; a Ray task's error is one line
without Ray's wrapper or colour codes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import RayActorError, RayTaskError

from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import (
    Events,
    LogFollower,
    StallWatch,
    death_cause,
    log_pids,
    one_line,
)
from agent_r1_async.run.output.logs import bound, tail_error
from tests.fakes.clock import FakeClock

T0 = 1000.0  # the buffer's wall clock at the first look


def _actor(t: float, done: int = 0, failed: int = 0, last_error: str = "") -> dict[str, Any]:
    return {"time": t, "policy_version": 0, "episodes_done": done, "episodes_failed": failed,
            "last_error": last_error}


def _buffer(t: float, actors: dict[str, Any], version: int = 0, ready: int = 0,
            sampled: int = 0, **drops: int) -> dict[str, Any]:
    return {"time": t, "learner_version": version, "groups_ready": ready,
            "sampled_groups": sampled, "actors": actors,
            "drops": {k.replace("__", "/"): v for k, v in drops.items()}}


def _watch(looks: list[dict[str, Any]], step_s: float = 10.0) -> list[tuple[str, str] | None]:
    """What `observe` says at each look, `step_s` apart (the buffer's clock moves too)."""
    clock = FakeClock(0.0)
    watch = StallWatch(clock=clock)
    said = []
    for look in looks:
        said.append(watch.observe(look))
        clock.advance(step_s)
    return said


def test_every_episode_refused_is_said_once_after_the_stall_time():
    # Looks 10 s apart: the first is the baseline (7 refusals of an earlier time); then the
    # buffer refuses 5 records every 10 s.
    looks = [_buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, done=2 * i)},
                     invalid_record=7 + 5 * i, invalid_record__token_id=7,
                     invalid_record__reward=5 * i) for i in range(8)]
    said = _watch(looks)
    assert said[:6] == [None] * 6  # 50 s without progress: not yet
    assert said[6] == ("every episode refused",
                       "no progress for 60 s: every episode refused: the buffer refused 30 "
                       "records (reward 30) and no group became ready")
    assert said[7] is None  # said once per stall


def test_no_groups_ready_names_the_latest_failure():
    looks = [_buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, done=1, failed=3 * i,
                                                     last_error="env_error in env e: boom")},
                     ready=1) for i in range(7)]
    assert _watch(looks)[6] == ("no groups ready",
                                "no progress for 60 s: no groups ready: actors ended 18 "
                                "episodes (18 failed; latest failure: env_error in env e: boom) "
                                "and none made a group ready")


def test_actors_dead_when_no_report_is_newer_than_the_stall_time():
    # actor-0 last reported at T0 - 5; the buffer's clock moves on.
    looks = [_buffer(T0 + 10 * i, {"actor-0": _actor(T0 - 5)}) for i in range(7)]
    assert _watch(looks)[6] == ("actors dead",
                                "no progress for 60 s: actors dead: no actor has reported in "
                                "the last 60 s (last reports: actor-0 65 s ago)")


def test_before_any_actor_reported_a_stall_waits_for_start_up():
    looks = [_buffer(T0 + 10 * i, {}) for i in range(20)]
    said = _watch(looks)
    assert said[:18] == [None] * 18  # engines may take minutes to load: 3 x STALL_S
    assert said[18] == ("actors dead", "no progress for 180 s: actors dead or not started: "
                                       "no actor has reported yet")


@pytest.mark.parametrize("progress", [
    {"version": 1},  # a new learner version
    {"ready": 1},  # a group became ready
    {"sampled": 2},  # the learner took groups
])
def test_progress_restarts_the_wait(progress):
    def look(i: int, **kw: int) -> dict[str, Any]:
        return _buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, failed=i)}, **kw)

    looks = [look(i) for i in range(5)] + [look(5, **progress)]
    looks += [look(i, **progress) for i in range(6, 12)]
    said = _watch(looks)
    assert said[:11] == [None] * 11  # 50 s, progress at 50 s, then 50 s more
    assert said[11] is not None and said[11][0] == "no groups ready"
    assert said[11][1].startswith("no progress for 60 s: ")


def test_a_learner_busy_with_a_long_update_is_not_a_stall():
    # Actors report but end nothing (admission control holds them); nothing is refused.
    looks = [_buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, done=8)}) for i in range(60)]
    assert _watch(looks) == [None] * 60


def test_a_learner_waiting_on_a_hung_actors_groups_says_what_it_waits_on():
    """The hung-actor drill: ready 1, in flight 3 held by the frozen actor-1, the learner's
    sample request waiting for 2, the healthy actor-0 idle (no credits): nothing ended and
    nothing was refused, so nothing was said for 180 s."""
    def look(i: int) -> dict[str, Any]:
        b = _buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, done=8),
                                  "actor-1": _actor(T0 - 2, done=5)}, version=14, ready=1,
                    sampled=28)
        return {**b, "sample_waiting": 2, "in_flight_groups": 3,
                "actor_credits": {"actor-0": 0, "actor-1": 3},
                "actor_silence_s": {"actor-0": 0.4, "actor-1": 2.0 + 10 * i}}

    said = _watch([look(i) for i in range(8)])
    assert said[:6] == [None] * 6
    assert said[6] == ("learner waiting",
                       "no progress for 60 s: the learner waits for 2 ready groups; the buffer "
                       "has 1 ready and 3 in flight (actor-1 holds 3, no progress for 62 s)")
    assert said[7] is None
    # With its sample request answered (the learner in a long update), nothing is said.
    idle = [{**look(i), "sample_waiting": 0} for i in range(8)]
    assert _watch(idle) == [None] * 8


def test_an_actor_restart_does_not_count_negative_episodes():
    # At 20 s actor-0 restarts: its totals fall from 40 to 0, then grow by 1 per look.
    ended = [30, 35, 0, 1, 2, 3, 4, 5, 6]
    looks = [_buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, failed=n)})
             for i, n in enumerate(ended)]
    said = _watch(looks)
    assert said[6] is not None and "actors ended 4 episodes (4 failed)" in said[6][1]


def _events(tmp_path: Path, num_actors: int = 2) -> tuple[Events, io.StringIO]:
    out = io.StringIO()
    return Events(Console(tmp_path / "logs", live=False, stream=out), tmp_path, num_actors, 1), out


def test_the_stall_line_quotes_the_first_refusal_in_the_buffer_log(tmp_path: Path, monkeypatch):
    events, out = _events(tmp_path, 1)
    clock = FakeClock(0.0)
    events.stall = StallWatch(clock=clock)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "buffer.log").write_text(
        "2026-01-01 10:00:00,000 INFO agent_r1_async.buffers.service: started\n"
        "2026-01-01 10:00:01,000 WARNING agent_r1_async.buffers.buffer: buffer: record refused "
        "(1 so far): episode_end 'e1': outcome_reward nan\n"
        "2026-01-01 10:00:02,000 WARNING agent_r1_async.buffers.buffer: buffer: record refused "
        "(2 so far): step 'e2'/0: process_reward inf\n")
    for i in range(8):
        events.watch(_buffer(T0 + 10 * i, {"actor-0": _actor(T0 + 10 * i, done=i)},
                             invalid_record=2 * i, invalid_record__reward=2 * i))
        clock.advance(10.0)
    assert out.getvalue().splitlines() == [
        "[launch] no progress for 60 s: every episode refused: the buffer refused 12 records "
        "(reward 12) and no group became ready; first refusal: episode_end 'e1': "
        f"outcome_reward nan; log: {logs / 'buffer.log'}"]
    assert "every episode refused" in (logs / "events.log").read_text()


def test_a_blocking_warning_in_an_actor_log_is_said_once_per_name(tmp_path: Path):
    events, out = _events(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    warning = ("2026-01-01 10:00:00,000 WARNING agent_r1_async.envs.offload: tool nap blocked its "
               "event loop for 3.0 s in one synchronous stretch: use async I/O or `await "
               "asyncio.to_thread(...)` for blocking work (warned once per name)\n")
    (logs / "actor-0.log").write_text("starting\n")
    events.watch(_buffer(T0, {}))
    assert out.getvalue() == ""
    with open(logs / "actor-0.log", "a") as f:
        f.write(warning)
    (logs / "actor-1.log").write_text(warning.replace("3.0 s", "2.5 s"))  # the same tool
    events.watch(_buffer(T0, {}))
    events.watch(_buffer(T0, {}))
    assert out.getvalue().splitlines() == [
        f"[launch] actor-0: {warning.split('offload: ')[1].strip()}; log: {logs / 'actor-0.log'}"]


def test_a_resumed_run_does_not_repeat_the_old_logs_warnings(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    old = ("2026-01-01 09:00:00,000 WARNING agent_r1_async.envs.offload: tool nap blocked its "
           "event loop for 3.0 s in one synchronous stretch\n")
    (logs / "actor-0.log").write_text(old)  # the previous launch's
    events, out = _events(tmp_path)
    events.watch(_buffer(T0, {}))
    assert out.getvalue() == ""
    with open(logs / "actor-0.log", "a") as f:
        f.write(old.replace("tool nap", "ArithEnv.step"))
    events.watch(_buffer(T0, {}))
    assert out.getvalue().startswith("[launch] actor-0: ArithEnv.step blocked its event loop")


def test_log_follower_reads_appended_lines_once_and_follows_rotation(tmp_path: Path):
    path = tmp_path / "actor-0.log"
    follower = LogFollower(path)
    assert follower.new_lines() == []  # not there yet
    path.write_text("one\ntw")
    assert follower.new_lines() == ["one"]  # an unfinished line waits for its end
    with open(path, "a") as f:
        f.write("o\nthree\n")
    assert follower.new_lines() == ["two", "three"]
    assert follower.new_lines() == []
    path.write_text("new\n")  # rotated (run/output/logs.py): shorter than what was read
    assert follower.new_lines() == ["new"]


def test_a_ray_task_error_is_told_as_the_exception_it_wraps():
    cause = TimeoutError("no batch after learner.sample_timeout_s=60.0: 0 groups ready")
    err = RayTaskError("LearnerHost.update", "Traceback ...", cause, pid=12, ip="10.0.0.1",
                       proctitle="ray::LearnerHost.update()").as_instanceof_cause()
    assert "\x1b[" in str(err)  # Ray colours its header
    assert one_line(err) == "TimeoutError: no batch after learner.sample_timeout_s=60.0: 0 groups ready"
    assert one_line(ValueError("\x1b[31mred\x1b[0m text\nmore")) == "ValueError: red text"


ROOT = Path(__file__).resolve().parents[4]

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


def test_most_episodes_failing_with_no_group_ready_is_held_as_failing():
    """A server that serves 1 episode of each group of 8: 7 of every 8 episodes fail, no
    group is ever whole. `failing` holds the line from the stall time on, with the seconds
    (the supervisor stops at launch.stop_after_stall_s); a few failures among successes, or
    progress, clear it."""
    clock = FakeClock(0.0)
    watch = StallWatch(clock=clock)
    err = "env_error in env openenv: it refused a new session: CAPACITY_REACHED"
    for i in range(8):  # 8 episodes ended per look, 7 failed
        watch.observe(_buffer(T0 + 10 * i, {"actor-0": _actor(
            T0 + 10 * i, done=i, failed=7 * i, last_error=err)}))
        if i < 6:
            assert watch.failing is None
        clock.advance(10.0)
    assert watch.failing == (70.0, "no progress for 70 s: no groups ready: actors ended 56 "
                                   f"episodes (49 failed; latest failure: {err}) and none made "
                                   "a group ready")
    watch.observe(_buffer(T0 + 80, {"actor-0": _actor(T0 + 80, done=8, failed=56)}, ready=1))
    assert watch.failing is None  # progress
    for i in range(9, 17):  # then 1 of every 8 fails: most succeed, nothing is held
        clock.advance(10.0)
        watch.observe(_buffer(T0 + 10 * i, {"actor-0": _actor(
            T0 + 10 * i, done=8 + 7 * (i - 8), failed=56 + (i - 8))}, ready=1))
    assert watch.failing is None

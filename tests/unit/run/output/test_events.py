"""Run events (run/output/events.py), each said once: the stall line with the first refusal
the buffer logged, an env's blocking warning from the actor's log, weights reaching the
actors, restarts and rejoins, env errors in one line with the log."""

from __future__ import annotations

import io
from pathlib import Path

from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.output.watches import StallWatch
from tests.fakes.clock import FakeClock
from tests.unit.run.output.stats_fakes import T0, actor, buffer


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
        events.watch(buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, done=i)},
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
    events.watch(buffer(T0, {}))
    assert out.getvalue() == ""
    with open(logs / "actor-0.log", "a") as f:
        f.write(warning)
    (logs / "actor-1.log").write_text(warning.replace("3.0 s", "2.5 s"))  # the same tool
    events.watch(buffer(T0, {}))
    events.watch(buffer(T0, {}))
    assert out.getvalue().splitlines() == [
        f"[launch] actor-0: {warning.split('offload: ')[1].strip()}; log: {logs / 'actor-0.log'}"]


def test_a_resumed_run_does_not_repeat_the_old_logs_warnings(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    old = ("2026-01-01 09:00:00,000 WARNING agent_r1_async.envs.offload: tool nap blocked its "
           "event loop for 3.0 s in one synchronous stretch\n")
    (logs / "actor-0.log").write_text(old)  # the previous launch's
    events, out = _events(tmp_path)
    events.watch(buffer(T0, {}))
    assert out.getvalue() == ""
    with open(logs / "actor-0.log", "a") as f:
        f.write(old.replace("tool nap", "ArithEnv.step"))
    events.watch(buffer(T0, {}))
    assert out.getvalue().startswith("[launch] actor-0: ArithEnv.step blocked its event loop")


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

"""Kill drill: SIGKILL the buffer, then the learner, then an actor, during ONE tiny launch.

The real console script in a subprocess (as test_launch.py): Ray, ZeroMQ, the buffer, a
one-rank learner and two HF actors. Each victim is found by the pid file its own process
wrote in the run directory (`buffer.pid`, `learner-rank-0.pid`, `actor-0.pid`) and killed by
that pid only, with SIGKILL (no shutdown code runs: no final snapshot, no checkpoint). The run
must still finish every update:

- the buffer is restarted from its snapshot (written on every learner checkpoint) on the same
  endpoints, and the learner's and actors' clients carry on;
- the learner is restarted from its latest checkpoint: versions continue from it;
- the actor's process is restarted by Ray and its loop re-run;
- each restart is one console line, and metrics.jsonl holds each update exactly once.

The freeze drill stops the same three roles with SIGSTOP instead, each for longer than
`launch.unresponsive_s`, in one launch: a stopped process is alive to Ray, so only the
launcher's liveness watch (run/processes/supervisor.py) can name it, and it must name exactly
the stopped one (the lighter representative: test_fault_hung_actor.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_launch import _await_updates, _start

pytestmark = pytest.mark.slow

TOTAL = 30


class _Output:
    """The launch's stdout+stderr, read by a thread (the pipe must never fill up)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, proc: subprocess.Popen, text: str, after: int,
                 timeout_s: float = 300) -> str:
        """The first line with `text` among those after the first `after`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [x for x in self.lines[after:] if text in x]
            if found:
                return found[0]
            assert proc.poll() is None, "\n".join(self.lines[-60:])
            time.sleep(0.2)
        raise AssertionError(f"no line with {text!r} in {timeout_s:.0f} s:\n"
                             + "\n".join(self.lines[-60:]))

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


def _kill(run_dir: Path, role: str) -> int:
    """SIGKILL the process that wrote RUN_DIR/<role>.pid (only that pid)."""
    pid = int((run_dir / f"{role}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


def _progress_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("v") and " | reward " in x]


def _progress_versions(text: str) -> list[int]:
    return [int(x.split()[0][1:]) for x in _progress_lines(text)]


def _updates(metrics: Path) -> list[int]:
    return [json.loads(x)["update"] for x in metrics.read_text().splitlines()]


def test_buffer_learner_and_actor_killed_in_one_launch_and_every_update_logged_once(tmp_path):
    # No periodic buffer snapshot within the test: the buffer restarts from the one written
    # with a learner checkpoint.
    proc = _start(tmp_path, "--set", f"learner.total_updates={TOTAL}",
                  "--set", "learner.checkpoint_every=2", "--set", "buffer.snapshot_interval_s=3600")
    out = _Output(proc)
    metrics = tmp_path / "metrics.jsonl"  # until the run's own exists
    try:
        metrics = _await_updates(proc, tmp_path, 3)
        run_dir = metrics.parent

        mark, buffer_pid = len(out.lines), _kill(run_dir, "buffer")
        buffer_line = out.wait_for(proc, "[launch] buffer process died", mark)
        n = len(_updates(metrics))
        metrics = _await_updates(proc, tmp_path, n + 3)

        # Odd: the update just logged is after the last checkpoint (checkpoint_every=2), so
        # the restarted learner most likely redoes it (unless the next one lands first).
        metrics = _await_updates(proc, tmp_path, len(_updates(metrics)) | 1)
        logged_before = len(_updates(metrics))
        mark, learner_pid = len(out.lines), _kill(run_dir, "learner-rank-0")
        learner_line = out.wait_for(proc, "[launch] learner rank 0 failed", mark)
        n = len(_updates(metrics))
        metrics = _await_updates(proc, tmp_path, n + 3)

        mark, actor_pid = len(out.lines), _kill(run_dir, "actor-0")
        actor_line = out.wait_for(proc, "[launch] actor-0 died", mark)
        proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = out.text()
    (metrics.parent / "launch-output.log").write_text(stdout)  # kept for a post-mortem
    assert proc.returncode == 0, stdout[-5000:]

    # One line per restart: which process, why, from which version; no traceback anywhere
    # (Ray adds its own "(raylet) A worker died ..." line per death).
    assert "Traceback" not in stdout, stdout[-5000:]
    # Each SIGKILL is one line. On this shared machine Ray's memory monitor may kill workers
    # too (it took the buffer and the learner in one run): those restarts are lines of their
    # own, naming that cause.
    # (Both lines say why in run/processes/forensics.py's words.)
    for role, line, killed, oom in (
            ("buffer process died", buffer_line, "killed by a signal (SIGKILL",
             "out of memory (Ray's memory monitor killed it"),
            ("learner rank 0 failed", learner_line, "killed by a signal (SIGKILL",
             "out of memory (Ray's memory monitor killed it")):
        assert f"[launch] {role}: {killed}" in line, line
        assert stdout.count(f"[launch] {role}: {killed}") == 1
        others = [x for x in stdout.splitlines() if f"[launch] {role}" in x and killed not in x]
        assert all(oom in x for x in others), others
    snap = int(buffer_line.split("restarted from its snapshot of version ")[1].split()[0])
    assert snap >= 2 and snap % 2 == 0, buffer_line  # a checkpoint's version
    assert "on the same endpoints" in buffer_line and "/3)" in buffer_line
    assert "restarting the learner group (1 ranks) from " in learner_line, learner_line
    resumed = int(learner_line.split("/checkpoints/step-")[1].split()[0])
    assert f"(version {resumed}" in learner_line and resumed >= 2
    # Updates logged before the kill but after the checkpoint are redone: their progress
    # lines say so, and they are not logged again (checked below: each update once).
    before, after = stdout.split(learner_line, 1)
    after = after.split("\n[launch] learner rank 0 failed")[0]  # to a later restart, if any
    last_logged = max(_progress_versions(before))
    assert last_logged >= logged_before
    redone = [v for v, line in zip(_progress_versions(after), _progress_lines(after),
                                   strict=True) if line.endswith(" (redone)")]
    assert redone == list(range(resumed + 1, last_logged + 1))
    assert "/logs/actor-0.log" in actor_line, actor_line  # the died line names its log ...
    assert "[launch] actor-0 restarted by Ray (1 of " in stdout  # ... and the restart is said
    # New processes wrote their pid files.
    for role, old in (("buffer", buffer_pid), ("learner-rank-0", learner_pid),
                      ("actor-0", actor_pid)):
        assert int((run_dir / f"{role}.pid").read_text()) != old, role

    # Every update exactly once, in order; the run ended at the last one with a checkpoint.
    assert _updates(metrics) == list(range(1, TOTAL + 1))
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [r["version"] for r in records] == list(range(1, TOTAL + 1))
    assert f"v{TOTAL} | reward" in stdout
    # The restarted actor serves the restarted learner's weights (not launch time's endpoint).
    assert records[-1]["actor/actor-0/policy_version"] >= TOTAL - 4, records[-1]
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").resolve().name == f"step-{TOTAL}"
    # learner.keep_checkpoints (default 3): old ones pruned.
    steps = sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step-"))
    assert len(steps) == 3 and f"step-{TOTAL}" in steps, steps
    assert (run_dir / "buffer" / "buffer.snapshot").stat().st_size > 0


FREEZE_TOTAL = 1000  # never reached: the test stops the launch
BOUND_S = 10
FREEZE_S = BOUND_S + 8  # past the bound and the launcher's next look (every 2 s)


def _freeze(run_dir: Path, role: str, seconds: float | None, frozen: list[int]) -> int:
    """SIGSTOP the process that wrote RUN_DIR/<role>.pid; SIGCONT it after `seconds` (None:
    leave it stopped: the launcher replaces a stopped actor). Its pid."""
    pid = int((run_dir / f"{role}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    frozen.append(pid)
    if seconds is not None:
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)
        frozen.remove(pid)
    return pid


def test_buffer_learner_and_actor_frozen_in_one_launch_are_named_and_the_run_goes_on(tmp_path):
    """A frozen buffer or learner (SIGSTOP 90 s) was survived in silence, and a frozen actor
    stalled the run. In one launch each is stopped in turn for longer than
    `launch.unresponsive_s` (10 s here): the buffer and the learner are named once and said to
    be back once they answer, never killed; the actor is named, its credits are reclaimed and
    its process is killed for Ray to restart. No other role is judged meanwhile (the actors'
    silence counts only while the buffer listens), and every update is logged exactly once."""
    proc = _start(tmp_path, "--set", f"learner.total_updates={FREEZE_TOTAL}",
                  "--set", "learner.checkpoint_every=100",
                  "--set", f"launch.unresponsive_s={BOUND_S}",
                  "--set", "env.step_timeout_s=3", "--set", "env.tool_timeout_s=2")
    out = _Output(proc)
    metrics = tmp_path / "metrics.jsonl"  # until the run's own exists
    frozen: list[int] = []
    marks: dict[str, int] = {}
    try:
        metrics = _await_updates(proc, tmp_path, 3)
        run_dir = metrics.parent
        pids = {}
        for role, name in (("buffer", "buffer"), ("learner-rank-0", "learner")):
            marks[name] = len(out.lines)
            pids[role] = _freeze(run_dir, role, FREEZE_S, frozen)
            out.wait_for(proc, f"[launch] {name} responsive again after ", marks[name])
            metrics = _await_updates(proc, tmp_path, len(_updates(metrics)) + 3)
        marks["actor"] = len(out.lines)
        pids["actor-0"] = _freeze(run_dir, "actor-0", None, frozen)
        out.wait_for(proc, "[launch] actor-0 restarted by Ray", marks["actor"])
        # The healthy actor alone may finish a fixed count before Ray has the new process up:
        # the run goes on until updates come after the restart, then the test stops it.
        restarted_at = len(_updates(metrics))
        metrics = _await_updates(proc, tmp_path, restarted_at + 2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=400)
    finally:
        for pid in frozen:  # only the processes this test stopped, if they still exist
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = out.text()
    (metrics.parent / "launch-output.log").write_text(stdout)  # kept for a post-mortem
    assert proc.returncode == 130, stdout[-5000:]  # stopped by the test (SIGTERM)
    assert "Traceback" not in stdout, stdout[-5000:]
    lines = stdout.splitlines()

    def said(text: str, after: str) -> list[str]:
        return [x for x in lines[marks[after]:] if x.startswith(f"[launch] {text}")]

    for name in ("buffer", "learner"):
        named = [x for x in lines if x.startswith(f"[launch] {name} unresponsive for ")]
        back = [x for x in lines if x.startswith(f"[launch] {name} responsive again after ")]
        assert len(named) == 1 and len(back) == 1, (named, back)
        assert said(f"{name} unresponsive for ", name) == named  # during its own freeze
        assert BOUND_S <= int(named[0].split(" for ")[1].split()[0]) <= FREEZE_S
        assert BOUND_S <= int(back[0].split(" after ")[1].split()[0]) <= FREEZE_S + 5
    assert said("buffer unresponsive for ", "buffer")[0].endswith("/logs/buffer.log")
    assert "its last answer: " in said("learner unresponsive for ", "learner")[0]
    # Nothing else was judged: no actor during the buffer's or the learner's freeze.
    actors = [x for x in lines if re.match(r"\[launch\] actor-\d unresponsive for ", x)]
    assert len(actors) == 1 and actors == said("actor-0 unresponsive for ", "actor"), actors
    assert "; reclaimed " in actors[0] and actors[0].endswith(
        "; killing its process for Ray to restart")
    assert said("actor-0 died: killed by the launcher: unresponsive for ", "actor")
    assert said("actor-0 restarted by Ray (1 of 3 restarts); its loop runs again", "actor")
    # Neither the buffer nor the learner was replaced; the actor was.
    for role in ("buffer", "learner-rank-0"):
        assert int((run_dir / f"{role}.pid").read_text()) == pids[role], role
    assert int((run_dir / "actor-0.pid").read_text()) != pids["actor-0"]
    assert not any(x.startswith(("[launch] buffer process died", "[launch] learner rank"))
                   for x in lines)
    logged = _updates(metrics)
    assert len(logged) >= restarted_at + 2
    assert logged == list(range(1, len(logged) + 1))

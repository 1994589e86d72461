"""A launch's stop is bounded and a second Ctrl-C ends it at once; its local Ray is private.

The learner is frozen (SIGSTOP) after the first update, so the stop waits on a learner that
never answers: with `launch.stop_timeout_s` the stop gives up on the final checkpoint after
that bound and says so; a second Ctrl-C during the stop exits at once (rc 130), naming what is
not saved. While the run trains, the test reads an actor's process: it holds the run's own
Ray token (in its environment, not `~/.ray/auth_token`) and its Ray session directory lies
under a 0700 directory of this user, which the forced exit removes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.test_launch import _await_updates, _start


def _freeze_learner(run_dir: Path) -> int:
    pid = int((run_dir / "learner-rank-0.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    return pid


def _communicate(proc, timeout: float) -> str:
    """The launch's output once it exits; past `timeout` it is killed and the test fails
    showing what it printed."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        raise AssertionError(f"the launch did not exit within {timeout:g} s:\n{out[-3000:]}") from None


def _end(proc, frozen: int | None) -> None:
    if frozen is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGCONT)
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def _private_ray_dir(actor_pid: int) -> Path:
    """The actor's Ray session root, read off the files it holds open (its Ray worker logs
    under `.../ar1-ray-XXXX/ray/session_*/logs/`)."""
    found = set()
    for fd in Path(f"/proc/{actor_pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            m = re.search(r"^(/\S*/ar1-ray-[^/]+)/ray/session_", os.readlink(fd))
            if m:
                found.add(m.group(1))
    assert len(found) == 1, found
    return Path(found.pop())


def test_a_second_ctrl_c_during_a_hung_stop_exits_at_once_naming_what_is_unsaved(tmp_path: Path):
    # No periodic buffer snapshot: the only manifest written after the first Ctrl-C is then the
    # stop's own, so the second Ctrl-C goes in while the stop runs (a periodic snapshot at the
    # moment of the first would send it before the stop began, merged with the first).
    proc = _start(tmp_path, "--set", "learner.total_updates=1000",
                  "--set", "learner.checkpoint_every=1000", "--set", "launch.stop_timeout_s=300",
                  "--set", "buffer.snapshot_interval_s=0")
    frozen = None
    try:
        run_dir = _await_updates(proc, tmp_path, 1).parent
        actor = int((run_dir / "actor-0.pid").read_text())
        env = dict(kv.split("=", 1) for kv in
                   Path(f"/proc/{actor}/environ").read_bytes().decode().split("\0") if "=" in kv)
        assert re.fullmatch(r"[0-9a-f]{64}", env["RAY_AUTH_TOKEN"]) and env["RAY_AUTH_MODE"] == "token"
        home_token = Path.home() / ".ray" / "auth_token"
        assert not home_token.exists() or home_token.read_text().strip() != env["RAY_AUTH_TOKEN"]
        private = _private_ray_dir(actor)
        assert stat.S_IMODE(private.stat().st_mode) == 0o700 and private.stat().st_uid == os.getuid()

        frozen = _freeze_learner(run_dir)
        manifest = run_dir / "buffer" / "buffer.manifest.json"
        asked = time.time()
        proc.send_signal(signal.SIGINT)  # the stop begins; its learner calls cannot end
        # The stop's buffer snapshot is written once the actors have stopped; then the stop
        # waits on the frozen learner (launch.stop_timeout_s: 300 s).
        deadline = time.monotonic() + 90
        while not (manifest.exists() and manifest.stat().st_mtime > asked):
            assert time.monotonic() < deadline and proc.poll() is None, "no stop snapshot"
            time.sleep(0.2)
        time.sleep(1.0)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        # The stop would wait 300 s for the frozen learner; the second interrupt exits without
        # it (rc 130 and its line below). 60 s: a guard against a hang, not a bound.
        out = _communicate(proc, 60)
    finally:
        _end(proc, frozen)
    assert proc.returncode == 130, out[-3000:]
    line = re.search(r"\[launch\] error: second interrupt: exiting now; not saved: (.*)", out)
    assert line, out[-3000:]
    assert re.fullmatch(r"the learner checkpoint \(the updates (since \S+|of this run \(no periodic "
                        r"checkpoint\)) are lost\)", line.group(1)), line.group(1)
    assert "Traceback" not in out
    assert not private.exists()


@pytest.mark.slow  # default run: the bound itself (test_learner_group.py, test_supervisor.py)
def test_a_final_checkpoint_that_never_ends_is_given_up_after_launch_stop_timeout_s(tmp_path: Path):
    proc = _start(tmp_path, "--set", "learner.total_updates=1000",
                  "--set", "learner.checkpoint_every=1000", "--set", "launch.stop_timeout_s=5")
    frozen = None
    try:
        run_dir = _await_updates(proc, tmp_path, 1).parent
        frozen = _freeze_learner(run_dir)
        proc.send_signal(signal.SIGINT)
        out = _communicate(proc, 120)  # a guard against a hang: the lines say what ended it
    finally:
        _end(proc, frozen)
    # A lost final checkpoint is a failure (rc 1), named with the bound that ended it.
    assert proc.returncode == 1, out[-3000:]
    assert ("[launch] error: final learner checkpoint failed: TimeoutError: learner stop_waiting: "
            "no answer within 5 s") in out, out[-3000:]
    assert ("agent-r1-async: the final checkpoint failed (TimeoutError: learner stop_waiting: no "
            "answer within 5 s): the updates since the start (no periodic checkpoint) are lost") in out
    assert "Traceback" not in out

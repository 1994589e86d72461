"""The launcher (the `agent-r1-async launch` driver) SIGKILLed, then `--resume`: every update is
in metrics.jsonl exactly once.

The learner checkpoints inside its update call (`Learner.run_once`), before the launcher has that
update's metrics: a launcher killed in between leaves checkpoint step-N and no metrics line for
update N, and the resume starts at N + 1. The test makes that window certain instead of
hoping to hit it: once a few updates are logged it freezes the launcher (SIGSTOP), waits until
the learner, still running under Ray, has checkpointed the update the frozen launcher asked
for, and only then SIGKILLs the launcher (its pid alone). The resume must log update N from
the checkpoint's own record (run/output/metrics.py, `MetricsLogger`) and train on from N + 1.

The launcher's embedded Ray mostly dies with it (Ray ties its GCS and raylet to the launcher
through the kernel, and the workers follow the raylet), but Ray's dashboard and runtime-env
agents were seen alive 30 s after the kill, and the launch's private Ray directory stays in
the temp dir. Whatever is still alive 30 s after the kill is ended here, each by its own pid
(the launcher's descendants seen before the kill and the pids the run's processes wrote in
RUN_DIR/*.pid), and that directory is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.cli_runs import CLI, ROOT, cli_env
from tests.integration.test_kill_drill import _Output
from tests.integration.test_launch import _await_updates, _start

pytestmark = pytest.mark.slow

TOTAL = 6


def _updates(metrics: Path) -> list[int]:
    return [json.loads(x)["update"] for x in metrics.read_text().splitlines()]


def _latest_step(run_dir: Path) -> int | None:
    link = run_dir / "checkpoints" / "latest"
    with contextlib.suppress(OSError):
        if link.exists():
            return int(link.resolve().name.removeprefix("step-"))
    return None


def _freeze_after_an_unlogged_checkpoint(proc: subprocess.Popen, metrics: Path) -> int:
    """SIGSTOP the launcher and wait until the learner checkpointed the update after the last
    one the launcher logged; that update. When the launcher stopped before asking for it (the
    learner then waits for nothing), let it run to its next line and try again."""
    for _ in range(5):
        os.kill(proc.pid, signal.SIGSTOP)
        logged = len(_updates(metrics))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _latest_step(metrics.parent) == logged + 1:
                return logged + 1
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGCONT)
        _await_updates(proc, metrics.parent.parent, logged + 1)
    raise AssertionError("the learner never checkpointed an update the launcher had not logged")


def _family(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


def _end(processes: list[psutil.Process], run_dir: Path, wait_s: float = 30.0) -> list[str]:
    """Wait up to `wait_s` for `processes` and the pids in RUN_DIR/*.pid to exit, SIGKILL each
    one still alive, by its pid; the names of those that outlived the launcher."""
    mine = {p.pid: p for p in processes}
    for pid_file in run_dir.glob("*.pid"):
        with contextlib.suppress(ValueError, psutil.Error):
            pid = int(pid_file.read_text())
            mine.setdefault(pid, psutil.Process(pid))
    _, alive = psutil.wait_procs(list(mine.values()), timeout=wait_s)
    survivors = []
    for p in alive:
        with contextlib.suppress(psutil.Error):
            survivors.append(p.name())
            p.kill()
    psutil.wait_procs(alive, timeout=30)
    return survivors


def _ray_temp_dirs(launcher_pid: int) -> list[Path]:
    """The launch's private Ray directory (run/processes/ray_cluster.py), which a killed
    launcher leaves behind: the one holding a Ray session named after the launcher's pid."""
    sessions = Path(tempfile.gettempdir()).glob(f"ar1-ray-*/ray/session_*_{launcher_pid}")
    return [s.parents[1] for s in sessions]


class _Killed:
    run_dir: Path


@contextlib.contextmanager
def _killing(proc: subprocess.Popen, tmp_path: Path) -> Iterator[_Killed]:
    """Around waiting for the moment: SIGKILL the launcher alone (its pid) when the block
    ends, then end what outlived it and remove its Ray directory. The block sets
    `run_dir` once it knows it (until then the test's own directory)."""
    killed = _Killed()
    killed.run_dir = tmp_path
    family: list[psutil.Process] = []
    try:
        yield killed
        family = _family(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            family = family or _family(proc.pid)
            proc.kill()
            proc.wait()
        _end(family, killed.run_dir)
        for d in _ray_temp_dirs(proc.pid):
            shutil.rmtree(d, ignore_errors=True)


def test_a_sigkilled_launcher_resumes_with_every_update_logged_once(tmp_path: Path):
    proc = _start(tmp_path, "--set", f"learner.total_updates={TOTAL}",
                  "--set", "learner.checkpoint_every=1")
    out = _Output(proc)
    with _killing(proc, tmp_path) as killed:
        metrics = _await_updates(proc, tmp_path, 2)
        run_dir = killed.run_dir = metrics.parent
        unlogged = _freeze_after_an_unlogged_checkpoint(proc, metrics)
        assert _updates(metrics) == list(range(1, unlogged))  # the window: checkpointed, not logged
    assert proc.returncode == -signal.SIGKILL, out.text()[-3000:]
    assert _latest_step(run_dir) == unlogged

    resumed = subprocess.run([*CLI, "launch", "--resume", str(run_dir)], capture_output=True,
                             text=True, timeout=420, env=cli_env(), cwd=ROOT)
    stdout = resumed.stdout
    (run_dir / "resume-output.log").write_text(stdout + resumed.stderr)  # for a post-mortem
    assert resumed.returncode == 0, stdout[-3000:] + resumed.stderr[-3000:]
    assert "Traceback" not in stdout + resumed.stderr

    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == list(range(1, TOTAL + 1))  # each exactly once
    recovered = [r["update"] for r in records if r.get("learner/recovered_from_checkpoint")]
    assert recovered == [unlogged]
    assert records[unlogged - 1]["version"] == unlogged
    # The resume trained from the checkpoint on: no update at or before it ran again.
    trained = [int(x.split()[0][1:]) for x in stdout.splitlines()
               if x.startswith("v") and " | reward " in x]
    assert trained == list(range(unlogged + 1, TOTAL + 1)), stdout[-3000:]
    assert _latest_step(run_dir) == TOTAL


def _wait_until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def test_a_resumed_run_whose_buffer_is_killed_reaches_every_update(tmp_path: Path):
    """The launcher SIGKILLed mid-run, `--resume`, then the buffer SIGKILLed once the resumed
    run has logged an update: the restarted buffer's restored credits (granted before its
    snapshot, their groups long gone) and the groups granted after it are reconciled with
    what the actors run (buffers/reclaim.py), so the run reaches its next update and its last,
    each logged once. This sequence once stalled a run for minutes."""
    total = 8
    proc = _start(tmp_path, "--set", f"learner.total_updates={total}",
                  "--set", "learner.checkpoint_every=1", "--set", "buffer.snapshot_interval_s=2")
    with _killing(proc, tmp_path) as killed:
        run_dir = killed.run_dir = _await_updates(proc, tmp_path, 2).parent
        # mid-run: episodes in flight

    resumed = subprocess.Popen([*CLI, "launch", "--resume", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=cli_env(), cwd=ROOT)
    out = _Output(resumed)
    metrics = run_dir / "metrics.jsonl"
    try:
        before = len(_updates(metrics))
        _wait_until(lambda: len(_updates(metrics)) > before, 300, "no update after the resume")
        killed_at = len(_updates(metrics))
        buffer_pid = int((run_dir / "buffer.pid").read_text())
        os.kill(buffer_pid, signal.SIGKILL)
        resumed.wait(timeout=420)
    finally:
        if resumed.poll() is None:
            resumed.send_signal(signal.SIGINT)
            resumed.wait(timeout=60)
    text = out.text()
    (run_dir / "resume-output.log").write_text(text)  # for a post-mortem
    assert resumed.returncode == 0, text[-3000:]
    assert "buffer process died" in text, text[-3000:]
    assert killed_at < total, "the buffer was killed after the last update: nothing tested"
    assert _updates(metrics) == list(range(1, total + 1))  # each exactly once, to the last

"""State on disk that verifies itself, in whole tiny launches: a corrupt buffer snapshot and a
corrupt latest checkpoint are skipped for the previous intact one, and the run goes on.

The corruptions are those a drill against a live launch made:
- garbage over `RUN_DIR/buffer/buffer.snapshot` (a group's env name made invalid UTF-8, which
  made the restarted buffer die in its loader with `UnicodeDecodeError: ... byte 0x9a`, so the
  launch hung), then the buffer's process SIGKILLed;
- in the newest checkpoint `step-N`: half of a DCP shard, half of `model.safetensors`, garbage
  over `learner_state.json` (each made `--resume` fail after ~12 s with a truncated
  `RayTaskError(CheckpointException)` line naming no file).

Each victim is found by the pid its own process wrote (`RUN_DIR/buffer.pid`) and killed by
that pid only. The resume tests share one finished 4-update run (a checkpoint every 2
updates: step-2 and step-4), each on its own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli_runs import CLI, ROOT, cli_env
from tests.integration.test_kill_drill import _Output, _progress_lines, _updates
from tests.integration.test_launch import _await_updates, _launch, _start

TOTAL = 8


def _drill_garbage(data: bytes) -> bytes:
    """The snapshot's bytes with its first `arithmetic` env name starting with byte 0x9a
    (invalid UTF-8 in a valid MessagePack frame: what the drill's restarted buffer died on);
    random bytes when the snapshot holds no record."""
    at = data.find(b"arithmetic")
    if at < 0:
        return os.urandom(len(data))
    return data[:at] + b"\x9a" + data[at + 1:]


@pytest.mark.slow  # unit level in the default run: test_snapshot.py, the service restoring the previous one
def test_a_corrupt_snapshot_then_a_buffer_kill_restores_the_previous_snapshot(tmp_path):
    # Snapshots only with learner checkpoints (every 2 updates): after update 4 is logged,
    # buffer.snapshot is version 4's and buffer.snapshot.prev version 2's.
    proc = _start(tmp_path, "--set", f"learner.total_updates={TOTAL}",
                  "--set", "learner.checkpoint_every=2", "--set", "buffer.snapshot_interval_s=3600")
    out = _Output(proc)
    metrics = tmp_path / "metrics.jsonl"
    try:
        metrics = _await_updates(proc, tmp_path, 4)
        run_dir = metrics.parent
        snap = run_dir / "buffer"
        pid = int((run_dir / "buffer.pid").read_text())
        os.kill(pid, signal.SIGSTOP)  # no snapshot can be written between the two steps
        try:
            entries = json.loads((snap / "buffer.manifest.json").read_text())["snapshots"]
            prev = next(e for e in entries if e["file"] == "buffer.snapshot.prev")
            newest = snap / "buffer.snapshot"
            newest.write_bytes(_drill_garbage(newest.read_bytes()))
        finally:
            mark = len(out.lines)
            os.kill(pid, signal.SIGKILL)
        died = out.wait_for(proc, "[launch] buffer process died", mark)
        restored = out.wait_for(proc, "[launch] buffer: snapshot", mark)
        proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.text()
    (run_dir / "launch-output.log").write_text(text)  # kept for a post-mortem
    assert proc.returncode == 0, text[-5000:]
    assert "Traceback" not in text, text[-5000:]

    assert prev["version"] == 2
    assert f"restarted from its snapshot of version 2 ({prev['groups']} groups ready)" in died
    assert restored.startswith(
        f"[launch] buffer: snapshot {newest} is corrupt (checksum mismatch); restored the "
        f"previous one {snap}/buffer.snapshot.prev ({prev['groups']} groups ready, "
        f"{prev['assembling']} assembling, version 2, written at "), restored
    assert "; lost: what the buffer accepted in the " in restored
    # The run finished every update, each logged once.
    assert _updates(metrics) == list(range(1, TOTAL + 1))
    assert int((run_dir / "buffer.pid").read_text()) != pid


# ---- --resume past a corrupt latest checkpoint ------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A tiny run of 4 updates with step-2 and step-4 (the final save re-writes step-4)."""
    run_dir, _ = _launch(tmp_path_factory.mktemp("finished"), "--set", "learner.total_updates=4",
                         "--set", "learner.checkpoint_every=2")
    steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert steps == ["latest", "step-2", "step-4"], steps
    return run_dir


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, symlinks=True)
    return copy.resolve()


def _corrupt(ckpt: Path, kind: str) -> str:
    """Corrupt one checkpoint the drill's way; the reason the launch must name."""
    if kind == "learner_state_garbage":
        path = ckpt / "learner_state.json"
        path.write_bytes(os.urandom(path.stat().st_size))
        return f"{path}: checksum mismatch"
    path = ckpt / ("dcp/__0_0.distcp" if kind == "dcp_shard_half" else "model.safetensors")
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return f"{path}: truncated: {size // 2:,} of {size:,} bytes"


def _resume(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "launch", "--resume", str(run_dir), *args], capture_output=True,
                          text=True, timeout=420, env=cli_env(), cwd=ROOT)


@pytest.mark.slow  # unit level in the default run: test_checkpoint.py, the same three kinds
@pytest.mark.parametrize("kind", ["dcp_shard_half", "safetensors_half", "learner_state_garbage"])
def test_resume_skips_a_corrupt_latest_checkpoint_and_finishes(finished_run, tmp_path, kind):
    run_dir = _copy(finished_run, tmp_path)
    ckpts = run_dir / "checkpoints"
    reason = _corrupt(ckpts / "step-4", kind)

    out = _resume(run_dir, "--set", "learner.total_updates=6")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-5000:]
    assert "Traceback" not in text and "\x1b[" not in text, text[-5000:]
    line = f"[launch] learner: checkpoint {ckpts}/step-4 is corrupt ({reason}); resumed from " \
           f"the previous one, {ckpts}/step-2 (version 2); updates 3..4 are lost and redone"
    assert [x for x in text.splitlines() if x.startswith("[launch] learner: ")] == [line]
    # Versions continue from step-2: 3 and 4 are redone (not logged again), then 5 and 6.
    progress = _progress_lines(out.stdout)
    assert [p.split()[0] for p in progress] == ["v3", "v4", "v5", "v6"], progress
    assert [p.endswith(" (redone)") for p in progress] == [True, True, False, False]
    assert _updates(run_dir / "metrics.jsonl") == [1, 2, 3, 4, 5, 6]
    assert (ckpts / "latest").resolve().name == "step-6"

    if kind != "dcp_shard_half":
        return
    # Every checkpoint corrupt (by content: their sizes still pass the launch's preflight):
    # one clean line naming the run directory and each reason, exit status 1.
    reasons = [f"{name}: {_corrupt(ckpts / name, 'learner_state_garbage')}"
               for name in ("step-6", "step-4", "step-2")]
    out = _resume(run_dir, "--set", "learner.total_updates=8")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-5000:]
    assert "Traceback" not in text and "\x1b[" not in text and "RayTaskError" not in text
    assert (f"agent-r1-async: NoIntactCheckpoint: no intact checkpoint to resume {run_dir} from: "
            + "; ".join(reasons)) in out.stderr.splitlines(), out.stderr[-3000:]

"""`launch` with a 2-rank FSDP2 learner (gloo on CPU): end to end, and a SIGKILLed rank.

The real console script in a subprocess, as in test_launch.py: Ray, ZeroMQ, buffer, two HF
actors, and the learner as a group of two Ray actors in one placement group.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.integration.test_launch import _await_updates, _launch, _records, _start


def test_launch_tiny_with_two_learner_ranks(tmp_path: Path):
    # every step computed: tiny.yaml's random model scores its episodes alike, so with steps of
    # advantage 0 left out the ranks would have nothing to share
    run_dir, stdout = _launch(tmp_path, "--set", "learner.world_size=2",
                              "--set", "learner.skip_zero_advantage=false")
    rows = _records(run_dir)
    assert [r["update"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["learner/tokens_per_s_total"] > 0 and r["learner/load_imbalance"] >= 1.0
    ckpt = run_dir / "checkpoints" / "latest"
    assert ckpt.resolve().name == "step-3" and "v3 | reward" in stdout
    # Sharded by both ranks, plus the HF model gathered on rank 0.
    assert sorted(p.name for p in (ckpt / "dcp").glob("*.distcp")) == ["__0_0.distcp",
                                                                     "__1_0.distcp"]
    assert (ckpt / "model.safetensors").stat().st_size > 1_000_000


@pytest.mark.slow
def test_a_killed_learner_rank_restarts_the_group_from_its_checkpoint(tmp_path: Path):
    proc = _start(tmp_path, "--set", "learner.world_size=2", "--set", "learner.total_updates=4",
                  "--set", "learner.checkpoint_every=1")
    try:
        metrics = _await_updates(proc, tmp_path, 2)
        victim = int((metrics.parent / "learner-rank-1.pid").read_text())
        os.kill(victim, signal.SIGKILL)
        stdout, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-4000:]
    assert "[launch] learner rank 1 failed: " in stdout
    line = stdout.split("[launch] learner rank 1 failed: ")[1].splitlines()[0]
    assert "restarting the learner group (2 ranks) from " in line and "/checkpoints/step-" in line
    resumed_from = int(line.split("/checkpoints/step-")[1].split()[0])
    assert resumed_from >= 2
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    updates = [r["update"] for r in rows]
    # Versions continue from the checkpoint; the run ends at 4 with a new checkpoint.
    assert updates[-1] == 4 and updates[: resumed_from] == list(range(1, resumed_from + 1))
    assert (metrics.parent / "checkpoints" / "latest").resolve().name == "step-4"
    assert int((metrics.parent / "learner-rank-1.pid").read_text()) != victim

"""Checkpoints are atomic: a save interrupted after some of its files are on disk leaves
`latest` on the previous complete checkpoint, and a trainer resumes from it exactly.

Two interruptions of the save of step 2, after step 1 was saved:
- SIGKILL of the saving process once step 2's DCP shards are written (a crash: no cleanup
  runs). A subprocess saves step 1, takes a step, starts saving step 2; a wrapper around
  `torch.distributed.checkpoint.save` lets the real save write the shards into the temp dir,
  then marks the moment and sleeps; the test kills it there.
- An exception raised by the DCP writer after it wrote the shards (in process): the save
  raises, its temp dir is removed, `latest` is untouched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agent_r1_async import config
from agent_r1_async.learner import checkpoint
from agent_r1_async.learner.checkpoint_files import DiskFullError
from agent_r1_async.learner.trainer import PolicyTrainer

REPO = Path(__file__).resolve().parents[2]

_SAVER = """
import sys, time
from pathlib import Path
import torch
import torch.distributed.checkpoint as dcp
from agent_r1_async.learner import checkpoint
from tests.unit.test_checkpoint_interrupted import take_a_step, trainer_for

model, run_dir = sys.argv[1], Path(sys.argv[2])
trainer = trainer_for(model)
take_a_step(trainer)
checkpoint.save_checkpoint(str(run_dir), trainer, {"version": 1, "updates": 1})
torch.save({"weights": trainer.published_state_dict(),
            "optim": trainer.optimizer.state_dict()}, run_dir / "expected-step-1.pt")
take_a_step(trainer)
real_save = dcp.save

def save_then_hang(*args, **kwargs):
    real_save(*args, **kwargs)  # step 2's shards are now on disk, in the temp dir
    (run_dir / "mid-save").touch()
    time.sleep(600)

dcp.save = save_then_hang
checkpoint.save_checkpoint(str(run_dir), trainer, {"version": 2, "updates": 2})
"""


def trainer_for(path: str) -> PolicyTrainer:
    cfg = config.config_from_dict({
        "model": {"name_or_path": path},
        "algorithm": {"name": "grpo", "group_size": 2},
        "learner": {"device": "cpu", "lr": 1e-2},
    })
    return PolicyTrainer(cfg, path)


def take_a_step(trainer: PolicyTrainer) -> None:
    for p in trainer.trainable_parameters():
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()


def _resumes_exactly(ckpt: str, expected: dict) -> None:
    restored = trainer_for(ckpt)  # its HF weights, then its DCP state on top
    state = checkpoint.load_trainer_state(ckpt, restored)
    assert (state["version"], state["updates"]) == (1, 1)
    weights = restored.published_state_dict()
    assert list(weights) == list(expected["weights"])
    assert all(torch.equal(weights[k], expected["weights"][k]) for k in weights)
    optim = restored.optimizer.state_dict()["state"]
    for i, moments in expected["optim"]["state"].items():
        assert torch.equal(optim[i]["exp_avg"], moments["exp_avg"])
        assert torch.equal(optim[i]["exp_avg_sq"], moments["exp_avg_sq"])


@pytest.mark.slow  # a subprocess imports torch and transformers: ~20 s on 2 busy cores
def test_a_save_killed_mid_write_leaves_latest_on_the_previous_checkpoint(
    tmp_path: Path, micro_model_dir: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, micro_model_dir, str(tmp_path)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "mid-save").exists():
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the save never reached its shards"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    root = tmp_path / "checkpoints"
    # The kill left step 2 half-made in its temp dir (weights, state and DCP shards, no RNG
    # files, never renamed); `latest` still names the complete step 1.
    temps = [p for p in root.iterdir() if p.name.startswith(".tmp-step-2-")]
    assert len(temps) == 1 and any((temps[0] / "dcp").iterdir())
    assert not (temps[0] / "rng" / "rank-0.pt").exists()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".tmp-")) == [
        "latest", "step-1"]
    assert os.readlink(root / "latest") == "step-1"
    latest = checkpoint.latest_checkpoint(str(tmp_path))
    assert latest == str((root / "step-1").resolve())

    # Resume from `latest`: the exact weights and AdamW moments of step 1.
    _resumes_exactly(latest, torch.load(tmp_path / "expected-step-1.pt", weights_only=True))

    # The resumed run saves its next checkpoint past the leftover temp dir.
    trainer = trainer_for(latest)
    checkpoint.load_trainer_state(latest, trainer)
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 2, "updates": 2})
    assert os.readlink(root / "latest") == "step-2"


def test_a_save_that_raises_in_the_dcp_writer_keeps_latest_and_cleans_up(
    tmp_path: Path, micro_model_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed.checkpoint as dcp

    trainer = trainer_for(micro_model_dir)
    take_a_step(trainer)
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    live = trainer.optimizer.state_dict()["state"]  # references to the live moments: copy
    expected = {"weights": {k: v.clone() for k, v in trainer.published_state_dict().items()},
                "optim": {"state": {i: {k: v.clone() for k, v in m.items()}
                                    for i, m in live.items()}}}
    take_a_step(trainer)
    real_save = dcp.save
    written: list[Path] = []

    def save_then_fail(state, checkpoint_id, **kwargs):
        real_save(state, checkpoint_id=checkpoint_id, **kwargs)
        written.extend(Path(checkpoint_id).iterdir())
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dcp, "save", save_then_fail)
    with pytest.raises(DiskFullError, match="disk full: checkpoint step-2 could not be written"):
        checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 2, "updates": 2})
    monkeypatch.undo()

    root = tmp_path / "checkpoints"
    assert written  # the shards were on disk when the writer failed
    assert sorted(os.listdir(root)) == ["latest", "step-1"]  # the temp dir is gone
    assert os.readlink(root / "latest") == "step-1"
    _resumes_exactly(checkpoint.latest_checkpoint(str(tmp_path)), expected)

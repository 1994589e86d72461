"""Checkpoints (learner/checkpoint.py, learner/checkpoint_files.py): atomic step dirs, the
`latest` symlink, full trainer state round trip, a full disk, pruning.

Checkpoints are atomic: a save interrupted after some of its files are on disk leaves `latest`
on the previous complete checkpoint, and a trainer resumes from it exactly. Two interruptions
of the save of step 2, after step 1 was saved:
- SIGKILL of the saving process once step 2's DCP shards are written (a crash: no cleanup
  runs). A subprocess saves step 1, takes a step, starts saving step 2; a wrapper around
  `torch.distributed.checkpoint.save` lets the real save write the shards into the temp dir,
  then marks the moment and sleeps; the test kills it there.
- An exception raised by the DCP writer after it wrote the shards (in process): the save
  raises, its temp dir is removed, `latest` is untouched.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from agent_r1_async import config, disk
from agent_r1_async.disk import DiskFullError
from agent_r1_async.learner import checkpoint, checkpoint_files
from agent_r1_async.learner.trainer import PolicyTrainer


def _trainer(path: str, algo: str = "ppo", bf16: bool | str = "auto") -> PolicyTrainer:
    cfg = config.config_from_dict({
        "model": {"name_or_path": path},
        "algorithm": {"name": algo, "group_size": 2},
        "learner": {"device": "cpu", "lr": 1e-2, "bf16": bf16},
    })
    return PolicyTrainer(cfg, path)


def _take_a_step(trainer: PolicyTrainer) -> None:
    for p in trainer.trainable_parameters():
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()


def test_save_load_roundtrip_and_latest_pointer(tmp_path, micro_model_dir):
    trainer = _trainer(micro_model_dir)
    _take_a_step(trainer)
    first = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    _take_a_step(trainer)
    random.seed(123)
    np.random.seed(7)
    torch.manual_seed(5)
    second = checkpoint.save_checkpoint(str(tmp_path), trainer,
                                        {"version": 2, "updates": 2, "samples_drawn": 4})
    expected_draws = (random.random(), np.random.rand(), torch.rand(1))
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["latest", "step-1", "step-2"]  # no temp dirs left
    assert os.readlink(root / "latest") == "step-2"
    assert checkpoint.latest_checkpoint(str(tmp_path)) == second != first
    assert json.loads((root / "step-2" / "learner_state.json").read_text())["samples_drawn"] == 4
    assert (root / "step-2" / "config.yaml").is_file()

    # A fresh trainer built from the checkpoint's HF weights + its DCP state is identical.
    restored = _trainer(second)
    state = checkpoint.load_trainer_state(second, restored)
    assert state["version"] == 2 and state["updates"] == 2
    mine, theirs = trainer.published_state_dict(), restored.published_state_dict()
    assert list(mine) == list(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert torch.equal(trainer.value_head.weight, restored.value_head.weight)
    a, b = trainer.optimizer.state_dict(), restored.optimizer.state_dict()
    assert all(torch.equal(a["state"][i]["exp_avg_sq"], b["state"][i]["exp_avg_sq"]) for i in a["state"])
    # RNG streams continue where the save left them.
    assert (random.random(), np.random.rand()) == expected_draws[:2]
    assert torch.equal(torch.rand(1), expected_draws[2])


def test_resaving_a_step_replaces_it(tmp_path, micro_model_dir):
    trainer = _trainer(micro_model_dir, algo="grpo")
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 3, "updates": 3})
    path = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 4, "updates": 3})
    assert json.loads((Path(path) / "learner_state.json").read_text())["version"] == 4


def test_missing_checkpoint_errors(tmp_path, micro_model_dir):
    assert checkpoint.latest_checkpoint(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="not a learner checkpoint"):
        checkpoint.load_trainer_state(micro_model_dir, _trainer(micro_model_dir))


# ---- a full disk, and pruning -------------------------------------------------------------

_real_torch_save = torch.save


def _save_to_a_full_disk(obj, f, *args, **kwargs):
    """torch.save to a file as it fails on a full disk: the same write to /dev/full (ENOSPC
    on every write) raises torch's own `RuntimeError: [enforce fail at inline_container.cc:
    ...] unexpected pos`. (Saves to memory, as DCP makes, are left alone.)"""
    if isinstance(f, (str, os.PathLike)):
        f = "/dev/full"
    _real_torch_save(obj, f, *args, **kwargs)


def _raise_enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _raise_dcp_checkpoint_exception(*args, **kwargs):
    """What DCP's save raises when a shard writer fails: a `CheckpointException` (a
    BaseException, not an Exception) holding each rank's error."""
    import traceback

    from torch.distributed.checkpoint.api import CheckpointException

    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    raise CheckpointException("save failed", {0: (enospc, traceback.StackSummary())})


@pytest.mark.parametrize("failure", ["torch_writer", "dcp_enospc", "dcp_checkpoint_exception"])
def test_a_full_disk_is_reported_as_such_and_the_last_checkpoint_stands(
        tmp_path, micro_model_dir, monkeypatch, failure):
    trainer = _trainer(micro_model_dir, algo="grpo")
    first = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    if failure == "torch_writer":  # the rng file's torch.save, after the shards
        monkeypatch.setattr(torch, "save", _save_to_a_full_disk)
    else:  # DCP's shard writer
        import torch.distributed.checkpoint as dcp

        monkeypatch.setattr(dcp, "save", _raise_enospc if failure == "dcp_enospc"
                            else _raise_dcp_checkpoint_exception)
    monkeypatch.setattr(disk, "free_bytes", lambda path: 4096)
    with pytest.raises(DiskFullError) as err:
        checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 2, "updates": 2})
    msg = str(err.value)
    root = tmp_path / "checkpoints"
    assert msg.startswith(f"disk full: checkpoint step-2 could not be written under {root} "
                          "(4,096 bytes free on that filesystem; the previous checkpoint takes ")
    assert "learner.keep_checkpoints" in msg
    assert sorted(os.listdir(root)) == ["latest", "step-1"]  # the half-written one is gone
    assert checkpoint.latest_checkpoint(str(tmp_path)) == first


def test_a_torch_write_error_with_space_left_is_not_called_a_full_disk(
        tmp_path, micro_model_dir, monkeypatch):
    trainer = _trainer(micro_model_dir, algo="grpo")
    monkeypatch.setattr(torch, "save", _save_to_a_full_disk)
    monkeypatch.setattr(disk, "free_bytes", lambda path: 50 * 2**30)
    with pytest.raises(RuntimeError, match="inline_container") as err:
        checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    assert not isinstance(err.value, DiskFullError)


def test_keep_checkpoints_prunes_old_complete_ones_only(tmp_path, micro_model_dir):
    trainer = _trainer(micro_model_dir, algo="grpo")
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "step-0").mkdir()  # not a checkpoint (no learner_state.json): never touched
    (root / ".tmp-step-9-abc").mkdir()  # a write in progress / crashed: never touched
    for n in range(1, 5):
        checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": n, "updates": n}, keep=2)
    assert sorted(os.listdir(root)) == [".tmp-step-9-abc", "latest", "step-0", "step-3",
                                        "step-4"]
    assert os.readlink(root / "latest") == "step-4"
    # keep=0 keeps everything.
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 5, "updates": 5}, keep=0)
    assert [p.name for p in checkpoint_files.complete_checkpoints(root)] == ["step-3", "step-4",
                                                                             "step-5"]


def test_pruning_never_removes_the_checkpoint_latest_names(tmp_path):
    root = tmp_path / "checkpoints"
    for n in (1, 2, 3):  # as written before checkpoints had manifests
        (root / f"step-{n}" / "dcp").mkdir(parents=True)
        (root / f"step-{n}" / "learner_state.json").write_text("{}")
    os.symlink("step-1", root / "latest")  # e.g. re-pointed by hand to an older one
    removed = checkpoint_files.prune_checkpoints(root, keep=1, latest=root / "latest")
    assert [p.name for p in removed] == ["step-2"]
    assert sorted(os.listdir(root)) == ["latest", "step-1", "step-3"]


def test_keep_checkpoints_config_key():
    assert config.LearnerConfig().keep_checkpoints == 3
    with pytest.raises(config.ConfigError, match=r"learner\.keep_checkpoints: must be >= 0"):
        config.config_from_dict({"learner": {"keep_checkpoints": -1}})


REPO = Path(__file__).resolve().parents[3]

_SAVER = """
import sys, time
from pathlib import Path
import torch
import torch.distributed.checkpoint as dcp
from agent_r1_async.learner import checkpoint
from tests.unit.learner.test_checkpoint import take_a_step, trainer_for

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


# ---- manifests, and resuming past a corrupt checkpoint --------------------------------------
#
# The three corruptions a drill left in a live run's newest checkpoint (each made `--resume`
# fail with a truncated Ray traceback and no fallback): half of a DCP shard, half of
# `model.safetensors`, garbage over `learner_state.json` (the same length here, so only the
# checksum tells).

def _corrupt(ckpt: Path, how: str) -> tuple[Path, str]:
    """Corrupt `ckpt` the drill's way; (the file, the reason `verify` must give)."""
    if how == "learner_state_garbage":
        path = ckpt / "learner_state.json"
        path.write_bytes(b"\x9a" * path.stat().st_size)
        return path, f"{path}: checksum mismatch"
    path = ckpt / ("dcp/__0_0.distcp" if how == "dcp_shard_half" else "model.safetensors")
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return path, f"{path}: truncated: {size // 2:,} of {size:,} bytes"


def _two_checkpoints(run_dir: Path, model: str) -> dict:
    """step-1 and step-2 of one trainer; step-1's weights and AdamW moments."""
    trainer = trainer_for(model)
    take_a_step(trainer)
    checkpoint.save_checkpoint(str(run_dir), trainer, {"version": 1, "updates": 1})
    live = trainer.optimizer.state_dict()["state"]
    expected = {"weights": {k: v.clone() for k, v in trainer.published_state_dict().items()},
                "optim": {"state": {i: {k: v.clone() for k, v in m.items()}
                                    for i, m in live.items()}}}
    take_a_step(trainer)
    checkpoint.save_checkpoint(str(run_dir), trainer, {"version": 2, "updates": 2})
    return expected


def _load(ckpt: str) -> tuple[PolicyTrainer, dict]:
    """What `Learner.from_checkpoint` does: HF weights of the checkpoint, then its DCP state."""
    trainer = trainer_for(ckpt)
    return trainer, checkpoint.load_trainer_state(ckpt, trainer)


def test_every_checkpoint_has_a_manifest_of_its_files_written_last(tmp_path, micro_model_dir):
    import hashlib

    path = Path(checkpoint.save_checkpoint(str(tmp_path), trainer_for(micro_model_dir),
                                           {"version": 1, "updates": 1}))
    doc = json.loads((path / "manifest.json").read_text())
    on_disk = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                     if p.is_file() and p.name != "manifest.json")
    assert sorted(doc["files"]) == on_disk
    assert {"learner_state.json", "model.safetensors", "dcp/.metadata", "dcp/__0_0.distcp",
            "rng/rank-0.pt"} <= set(on_disk)
    for name, entry in doc["files"].items():
        data = (path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert json.loads((path / "learner_state.json").read_text())["manifest"] is True
    # Written last: no file of the checkpoint is newer than its manifest.
    newest = max((path / n).stat().st_mtime_ns for n in on_disk)
    assert (path / "manifest.json").stat().st_mtime_ns >= newest
    assert checkpoint_files.verify(path) == checkpoint_files.Verdict()


@pytest.mark.parametrize("how", ["dcp_shard_half", "safetensors_half", "learner_state_garbage"])
def test_resume_skips_a_corrupt_latest_checkpoint_for_the_previous_one(
        tmp_path, micro_model_dir, how):
    expected = _two_checkpoints(tmp_path, micro_model_dir)
    root = (tmp_path / "checkpoints").resolve()
    _, reason = _corrupt(root / "step-2", how)
    assert checkpoint_files.verify(root / "step-2").problem == reason

    (trainer, state), report = checkpoint.resume_intact(str(tmp_path), _load)
    assert report.checkpoint == str(root / "step-1") and report.version == 1
    assert report.skipped == [(str(root / "step-2"), reason)]
    assert report.line() == (f"learner: checkpoint {root}/step-2 is corrupt ({reason}); resumed "
                             f"from the previous one, {root}/step-1 (version 1); update 2 is "
                             "lost and redone")
    assert (state["version"], state["updates"]) == (1, 1)
    weights = trainer.published_state_dict()
    assert all(torch.equal(weights[k], expected["weights"][k]) for k in expected["weights"])
    optim = trainer.optimizer.state_dict()["state"]
    assert all(torch.equal(optim[i]["exp_avg_sq"], m["exp_avg_sq"])
               for i, m in expected["optim"]["state"].items())
    # A truncated file is seen by size alone: `latest_checkpoint` already names step-1.
    if how != "learner_state_garbage":
        assert checkpoint.latest_checkpoint(str(tmp_path)) == str(root / "step-1")


def test_a_load_that_raises_after_verification_falls_back_the_same_way(
        tmp_path, micro_model_dir):
    """Bad bytes the writer itself wrote (its manifest matches them): DCP's load raises, and
    the resume goes on to the previous checkpoint, naming the error."""
    _two_checkpoints(tmp_path, micro_model_dir)
    step2 = (tmp_path / "checkpoints" / "step-2").resolve()
    shard = step2 / "dcp" / "__0_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)
    checkpoint_files.write_manifest(step2)  # the manifest now vouches for the half shard
    assert checkpoint_files.verify(step2).usable

    (_, state), report = checkpoint.resume_intact(str(tmp_path), _load)
    assert state["version"] == 1 and report.checkpoint == str(step2.parent / "step-1")
    ((path, why),) = report.skipped
    # DCP's CheckpointException (a BaseException, whose text is a traceback per rank) is
    # told by its rank's own error, on one line.
    assert path == str(step2) and why.startswith(
        "loading it failed: CheckpointException on rank 0: RuntimeError: PytorchStreamReader "
        "failed reading zip archive")
    assert "\n" not in why and "\x1b" not in why


def test_no_intact_checkpoint_is_one_line_naming_the_run_directory(tmp_path, micro_model_dir):
    from ray.exceptions import RayTaskError

    from agent_r1_async.run.output.lines import one_line

    _two_checkpoints(tmp_path, micro_model_dir)
    root = (tmp_path / "checkpoints").resolve()
    _, second = _corrupt(root / "step-2", "dcp_shard_half")
    (root / "step-1" / "manifest.json").unlink()
    with pytest.raises(checkpoint.NoIntactCheckpoint) as err:
        checkpoint.resume_intact(str(tmp_path), _load)
    expected = (f"no intact checkpoint to resume {tmp_path} from: step-2: {second}; step-1: "
                f"{root}/step-1/manifest.json: missing")
    assert str(err.value) == expected
    # What the launch prints, also when Ray's task error carries it: the whole line, as is.
    wrapped = RayTaskError("LearnerHost.start", "Traceback (most recent call last):\n ...",
                           err.value).as_instanceof_cause()
    assert one_line(wrapped) == one_line(err.value) == f"NoIntactCheckpoint: {expected}"


def test_a_checkpoint_written_before_manifests_resumes_unverified(tmp_path, micro_model_dir):
    trainer = trainer_for(micro_model_dir)
    path = Path(checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 3, "updates": 3}))
    (path / "manifest.json").unlink()
    state = json.loads((path / "learner_state.json").read_text())
    del state["manifest"]  # what the older writer wrote
    (path / "learner_state.json").write_text(json.dumps(state))

    (_, loaded), report = checkpoint.resume_intact(str(tmp_path), _load)
    assert loaded["version"] == 3 and report.skipped == []
    assert report.line() == (f"learner: resumed from {path.resolve()} (version 3), unverified: "
                             "no manifest.json: written before checkpoints had one")
    # Pruning counts it as complete.
    assert checkpoint_files.complete_checkpoints(path.parent) == [path]


def test_pruning_counts_only_checkpoints_that_pass_the_check(tmp_path, micro_model_dir):
    """keep=2 with step-2 corrupt: the fallback from step-3 is step-1, which stays; step-2 is
    neither counted nor removed (left for inspection)."""
    trainer = trainer_for(micro_model_dir)
    root = tmp_path / "checkpoints"
    for n in (1, 2):
        checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": n, "updates": n}, keep=2)
    _corrupt(root / "step-2", "safetensors_half")
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 3, "updates": 3}, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1", "step-2", "step-3"]
    assert [p.name for p in checkpoint_files.complete_checkpoints(root)] == ["step-1", "step-3"]
    checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 4, "updates": 4}, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-3", "step-4"]


def _two_rank_resume(rank: int, port: int, run_dir: str, out: str) -> None:
    """One rank of `test_two_ranks_agree_on_the_checkpoint_they_resume`: a load that raises
    on rank 1 only, for step-3; which files each rank read to verify."""
    from agent_r1_async.learner import distributed

    torch.set_num_threads(1)
    distributed.init_group(rank, 2, "127.0.0.1", port, "gloo", timeout_s=60)
    hashed: list[str] = []
    real = checkpoint_files.file_sha256
    checkpoint_files.file_sha256 = lambda p: (hashed.append(Path(p).parent.name), real(p))[1]

    def load(ckpt: str) -> str:
        if rank == 1 and ckpt.endswith("step-3"):
            raise RuntimeError("rank 1 cannot read its shard")
        return ckpt

    try:
        loaded, report = checkpoint.resume_intact(run_dir, load)
        Path(out, f"rank-{rank}.json").write_text(json.dumps({
            "loaded": Path(loaded).name, "skipped": report.skipped, "hashed": sorted(hashed)}))
    finally:
        distributed.destroy_group()


def test_two_ranks_agree_on_the_checkpoint_they_resume(tmp_path):
    """The ranks of a sharded learner go to the next checkpoint together: step-4 fails its
    check (rank 0 alone reads every byte, and every rank gets its verdict), step-3 fails to
    load on rank 1 only, and both ranks resume step-2."""
    import torch.multiprocessing as mp

    from agent_r1_async.learner import distributed

    root = tmp_path / "checkpoints"
    for n in (2, 3, 4):
        path = root / f"step-{n}"
        (path / "dcp").mkdir(parents=True)
        (path / "dcp" / "__0_0.distcp").write_bytes(b"\x07" * 1000)
        (path / "learner_state.json").write_text(json.dumps({"version": n, "manifest": True}))
        checkpoint_files.write_manifest(path)
    os.symlink("step-4", root / "latest")
    os.truncate(root / "step-4" / "dcp" / "__0_0.distcp", 10)
    mp.spawn(_two_rank_resume, args=(distributed.free_port(), str(tmp_path), str(tmp_path)),
             nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    step4, step3 = (str(root.resolve() / f"step-{n}") for n in (4, 3))
    truncated = f"{step4}/dcp/__0_0.distcp: truncated: 10 of 1,000 bytes"
    assert [got["loaded"] for got in ranks] == ["step-2", "step-2"]
    assert ranks[0]["skipped"] == [[step4, truncated],
                                   [step3, "loading it failed on another rank"]]
    assert ranks[1]["skipped"] == [[step4, truncated], [step3, "loading it failed: "
                                                        "RuntimeError: rank 1 cannot read its shard"]]
    # Only rank 0 hashed: step-3's and step-2's two files each (step-4 failed on its size).
    assert ranks[0]["hashed"] == ["dcp", "dcp", "step-2", "step-3"] and ranks[1]["hashed"] == []


def test_a_restore_reaches_the_bf16_working_copy(tmp_path, micro_model_dir):
    """Restoring writes the master weights in place, so the bf16 copy the next forward runs on
    is refreshed from them: every copied tensor equals the restored master rounded to bf16."""
    trainer = _trainer(micro_model_dir, bf16=True)
    _take_a_step(trainer)
    first = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 1, "updates": 1})
    _take_a_step(trainer)
    second = checkpoint.save_checkpoint(str(tmp_path), trainer, {"version": 2, "updates": 2})
    restored = _trainer(first, bf16=True)  # bf16 on whatever this CPU measures
    assert restored.bf16_copy is not None
    checkpoint.load_trainer_state(second, restored)
    assert restored.bf16_copy.refresh() > 0
    masters = dict(restored.net.named_parameters())
    for name, work in restored.bf16_copy.module.named_parameters():
        assert torch.equal(work, masters[name].detach().to(torch.bfloat16)), name
    mine = dict(trainer.net.named_parameters())
    assert all(torch.equal(masters[n], mine[n]) for n in masters)  # it is the second step's

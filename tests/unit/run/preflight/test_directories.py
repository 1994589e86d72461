"""The directories a launch writes (run/preflight/directories.py): a run root no file can be
written in is refused with the OS's reason and leaves nothing behind; `--resume` of a directory
without a checkpoint is refused unless `--fresh`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import directories
from agent_r1_async.run.preflight.feasibility import check_feasible


def _cfg(*overrides: str) -> RunConfig:
    return config_from_dict({}, ["engine.backend=vllm", "launch.run_root=/tmp", *overrides])


def test_a_run_root_under_proc_is_refused_with_the_os_reason(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("launch.run_root=/proc/runs"))
    message = str(info.value)
    # root: procfs has no such entry to make; anyone else: /proc is not theirs to write
    reason = "No such file or directory" if os.geteuid() == 0 else "Permission denied"
    assert message == (f"launch.run_root: cannot write in '/proc/runs': {reason}; choose a "
                       "writable directory")
    assert not Path("/proc/runs").exists()


def test_a_full_run_root_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The probe writes a file: a full disk (here: its write fails with ENOSPC) refuses."""
    def full(directory: Path) -> None:
        assert directory == tmp_path / "runs"  # made for the probe ...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(directories, "_write_probe", full)
    with pytest.raises(ConfigError) as info:
        directories.run_root_writable(str(tmp_path / "runs"))
    assert str(info.value) == (f"launch.run_root: cannot write in '{tmp_path / 'runs'}': No "
                               "space left on device; choose a writable directory")
    assert list(tmp_path.iterdir()) == []  # ... and removed after it


def test_a_writable_run_root_passes_and_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "old.txt").write_text("x")
    directories.run_root_writable(str(tmp_path / "new" / "runs"))
    directories.run_root_writable(str(tmp_path / "kept"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept", "old.txt"]


def test_a_read_only_run_root_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes in a 0555 directory")
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(ConfigError, match=r"^launch\.run_root: cannot write in .*: Permission "
                                          r"denied; choose a writable directory$"):
        directories.run_root_writable(str(tmp_path / "ro" / "runs"))


def _run_dir(tmp_path: Path, *entries: str) -> Path:
    run = tmp_path / "tiny-20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    for name in entries:
        (run / "checkpoints" / name).mkdir()
    return run


def test_resume_without_a_checkpoint_is_refused_unless_fresh(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(), resume=str(run))
    assert str(info.value) == (
        f"--resume: {run} has no checkpoint to resume from (checkpoints/ is empty); pass "
        "--fresh to train it from scratch in that directory")
    check_feasible(_cfg(), resume=str(run), fresh=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]


def test_resume_names_what_checkpoints_holds_when_nothing_is_complete(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, ".tmp-step-2-abc", "step-1")  # step-1 has no learner_state.json
    with pytest.raises(ConfigError) as info:
        directories.resume_has_checkpoint(str(run), fresh=False)
    assert str(info.value) == (
        f"--resume: {run} has no checkpoint to resume from (checkpoints/ holds no intact "
        f"checkpoint: step-1: {run}/checkpoints/step-1/manifest.json: missing (and no "
        "learner_state.json: not a checkpoint)); pass --fresh to train it from scratch in that "
        "directory")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ConfigError, match=r"\(no checkpoints/ directory\)"):
        directories.resume_has_checkpoint(str(bare), fresh=False)


def test_resume_with_a_checkpoint_passes_and_fresh_is_refused_there(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "step-2", "step-2/dcp")  # a checkpoint as written before manifests
    (run / "checkpoints" / "step-2" / "learner_state.json").write_text('{"version": 2}')
    check_feasible(_cfg(), resume=str(run))
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(), resume=str(run), fresh=True)
    assert str(info.value) == (
        f"--fresh: {run} has a checkpoint (step-2) and would resume from it, not start from "
        "scratch: drop --fresh to resume it, or start a new run without --resume")

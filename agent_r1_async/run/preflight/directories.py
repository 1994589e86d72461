"""The directories a launch writes: `launch.run_root` (or a resumed run's directory) must take a
file, and `--resume RUN_DIR` needs a checkpoint there unless `--fresh` says to train that
directory from scratch. Checks `launch` makes before Ray starts (feasibility.py)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from agent_r1_async.config import ConfigError
from agent_r1_async.learner.checkpoint_files import complete_checkpoints, step_dirs, verify


def run_root_writable(run_root: str) -> None:
    """The run directory is made under `run_root` (parents created): the nearest existing
    ancestor must be a directory, and a file must be writable where the run directory goes
    (`dir_writable`: a permission, a read-only or full filesystem, /proc, are all refused)."""
    existing = Path(run_root)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(f"launch.run_root: {run_root!r} cannot be made: {str(existing)!r} is "
                          "a file, not a directory")
    dir_writable(run_root, "launch.run_root")


def dir_writable(directory: str, key: str) -> None:
    """Make `directory` (and its missing parents), write a small file in it and remove it; a
    ConfigError naming `key` and the OS's reason when any step fails. Nothing is left behind:
    the probe file is removed and so are the directories this check made (the launch makes
    them again)."""
    path = Path(directory)
    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        _write_probe(path)
    except OSError as e:
        failed = Path(str(e.filename)) if e.filename else path
        where = f" (at {str(failed)!r})" if failed in path.parents else ""  # a parent's mkdir
        raise ConfigError(f"{key}: cannot write in {directory!r}{where}: {e.strerror or e}; "
                          "choose a writable directory") from None
    finally:
        for p in made:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()


def _write_probe(directory: Path) -> None:
    """Write a small file in `directory`, to its disk, and remove it."""
    fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
    try:
        os.write(fd, b"agent-r1-async write probe\n")
        os.fsync(fd)  # a full disk or quota shows here at the latest
    finally:
        os.close(fd)
        os.unlink(probe)


def resume_has_checkpoint(run_dir: str, fresh: bool) -> None:
    """`--resume RUN_DIR` continues from RUN_DIR's latest checkpoint; without one the learner
    would silently start at update 0. Refused, unless `--fresh` asks for exactly that; with
    `--fresh`, a directory that has a checkpoint is refused instead (it would resume, not
    start afresh). A complete checkpoint is a `step-N` directory with its learner state
    (learner/checkpoint_files.py, read without importing torch); `latest` names only those."""
    found = complete_checkpoints(Path(run_dir) / "checkpoints")
    if fresh and found:
        raise ConfigError(
            f"--fresh: {run_dir} has a checkpoint ({found[-1].name}) and would resume from it, "
            "not start from scratch: drop --fresh to resume it, or start a new run without "
            "--resume")
    if fresh or found:
        return
    raise ConfigError(f"--resume: {run_dir} has no checkpoint to resume from "
                      f"({_checkpoints_state(Path(run_dir) / 'checkpoints')}); pass --fresh to "
                      "train it from scratch in that directory")


def _checkpoints_state(root: Path) -> str:
    if not root.is_dir():
        return "no checkpoints/ directory"
    steps = step_dirs(root)[::-1]  # newest first, each with why it cannot be used
    if steps:
        shown = "; ".join(f"{p.name}: {verify(p, full=False).problem}" for p in steps[:3])
        return f"checkpoints/ holds no intact checkpoint: {shown}" + ("; ..." if len(steps) > 3 else "")
    names = sorted(p.name for p in root.iterdir())
    if not names:
        return "checkpoints/ is empty"
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"checkpoints/ holds no complete checkpoint: {shown}"

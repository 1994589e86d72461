"""The checkpoint directory's housekeeping: a full disk said plainly, old checkpoints pruned.

Disk full: torch's writer reports a failed write as `RuntimeError: [enforce fail at
inline_container.cc:672] unexpected pos ...` (no errno), which never says why. `disk_full`
recognises a failed write as a full disk when the error chain carries ENOSPC / EDQUOT or
"No space left on device", or when it is torch's writer error and the filesystem has less than
`_NEARLY_FULL` bytes free at that moment; `DiskFullError` then names the directory and the
bytes free. Any other error passes through unchanged.

Pruning (`learner.keep_checkpoints`): keep the newest k *complete* checkpoints (a `step-N`
directory with its `learner_state.json`; `save_checkpoint` only ever renames a finished one into
place), never the one `latest` names, never anything else in the directory (`.tmp-*` of a
write in progress, the `latest` link). A checkpoint is first renamed to a dot-name, then
removed, so a crash mid-removal leaves no half `step-N` for a later resume to trip on.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

_STEP = re.compile(r"step-(\d+)")
_NEARLY_FULL = 256 * 2**20  # a torch write that failed with less than this free: the disk
_TORCH_WRITE_ERRORS = ("inline_container", "unexpected pos", "file write failed", "basic_ios")


class DiskFullError(RuntimeError):
    """A checkpoint could not be written because its filesystem is full."""


def free_bytes(path: Path) -> int:
    """Bytes free to this process on `path`'s filesystem (its nearest existing parent's)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def disk_full(exc: BaseException, free: int) -> bool:
    """Did this write fail because the disk is full? (`free`: bytes free right after it.)"""
    seen: set[int] = set()
    e: BaseException | None = exc
    torch_write = False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e)
        if "No space left on device" in text:
            return True
        torch_write |= isinstance(e, RuntimeError) and any(s in text for s in _TORCH_WRITE_ERRORS)
        e = e.__cause__ or e.__context__
    return torch_write and free < _NEARLY_FULL


def disk_full_error(exc: BaseException, what: str, directory: Path, free: int,
                    previous: Path | None) -> DiskFullError:
    """The error to raise instead of `exc`: where, how much is free, what to do."""
    size = f"; the previous checkpoint takes {dir_bytes(previous):,} bytes" if previous else ""
    return DiskFullError(
        f"disk full: {what} could not be written under {directory} ({free:,} bytes free on "
        f"that filesystem{size}; the write failed with {type(exc).__name__}: "
        f"{str(exc)[:120]}). Free some space, or keep fewer checkpoints "
        "(learner.keep_checkpoints).")


def disk_full_message(exc: BaseException) -> str | None:
    """The message of a `DiskFullError` behind `exc` (raised in another process: Ray's task
    error keeps it as `.cause`), or None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, DiskFullError) and str(e).startswith("disk full"):
            return str(e)
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def complete_checkpoints(root: Path) -> list[Path]:
    """`step-N` directories holding a finished checkpoint, oldest first."""
    found = []
    for p in root.iterdir() if root.is_dir() else ():
        match = _STEP.fullmatch(p.name)
        if match and p.is_dir() and not p.is_symlink() and (p / "learner_state.json").is_file():
            found.append((int(match.group(1)), p))
    return [p for _, p in sorted(found)]


def prune_checkpoints(root: Path, keep: int, latest: Path | None) -> list[Path]:
    """Remove all but the newest `keep` complete checkpoints (0: keep all), never `latest`;
    returns what was removed."""
    if keep <= 0:
        return []
    done = complete_checkpoints(root)
    protect = latest.resolve() if latest is not None else None
    removed = []
    for path in done[:-keep]:
        if protect is not None and path.resolve() == protect:
            continue
        doomed = path.with_name(f".del-{path.name}")
        path.rename(doomed)  # gone from step-N at once; the slow removal cannot leave half
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(path)
    return removed

"""A full disk, said plainly: free space, and whether a failed write failed for lack of it.

The learner's checkpoints, the run's metrics sinks and the launch's last line all ask the same
two questions; this module answers them without torch or Ray (the launch driver imports it).

torch's writer reports a failed write as `RuntimeError: [enforce fail at
inline_container.cc:672] unexpected pos ...` (no errno), which never says why. `disk_full`
recognises a failed write as a full disk when the error chain carries ENOSPC / EDQUOT or
"No space left on device" (also as one rank's error inside DCP's `CheckpointException`), or
when it is torch's writer error and the filesystem has less than `_NEARLY_FULL` bytes free at
that moment. `DiskFullError` is the error a writer raises instead, naming where and the bytes
free; `disk_full_message` finds it behind another error (one raised in another process
included), and `disk_full_line` makes any error that is a full disk one line.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

_NEARLY_FULL = 256 * 2**20  # a torch write that failed with less than this free: the disk
_TORCH_WRITE_ERRORS = ("inline_container", "unexpected pos", "file write failed", "basic_ios")


class DiskFullError(RuntimeError):
    """A write (a checkpoint) could not be done because its filesystem is full."""


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
        if any(disk_full(x, free) for x in _rank_errors(e)):
            return True
        e = e.__cause__ or e.__context__
    return torch_write and free < _NEARLY_FULL


def _rank_errors(e: BaseException) -> list[BaseException]:
    """The per-rank errors inside DCP's `CheckpointException` (its `failures`: rank ->
    (error, stack)); [] for any other error. Duck-typed: the launcher imports this module
    without torch."""
    failures = getattr(e, "failures", None)
    if not isinstance(failures, dict):
        return []
    return [f[0] for f in failures.values()
            if isinstance(f, tuple) and f and isinstance(f[0], BaseException)]


def error_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception behind it, each once: its `__cause__` and `__context__`, and
    the `.cause` Ray's task errors keep of the exception raised in another process."""
    chain: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is c for c in chain):
            continue
        chain.append(e)
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return chain


def disk_full_message(exc: BaseException) -> str | None:
    """The message of a `DiskFullError` behind `exc` (also one raised in another process),
    or None."""
    return next((str(e) for e in error_chain(exc)
                 if isinstance(e, DiskFullError) and str(e).startswith("disk full")), None)


def disk_full_line(exc: BaseException, where: Path) -> str | None:
    """One line for an error that is a full disk, wherever the write was (a `DiskFullError`'s
    own message, or the file an OSError names, else `where`) with the bytes free there; None
    for any other error."""
    full = disk_full_message(exc)
    if full:
        return full
    chain = error_chain(exc)
    path = next((Path(str(e.filename)) for e in chain if isinstance(e, OSError) and e.filename),
                where)
    free = free_bytes(path)
    if not any(disk_full(e, free) for e in chain):
        return None
    return f"disk full: {path} ({free:,} bytes free on that filesystem)"


def dir_bytes(path: Path) -> int:
    """Bytes of the files under `path` (links not followed)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())

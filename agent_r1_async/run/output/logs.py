"""Per-process log files: `RUN_DIR/logs/<role>-<index>.log`, one per process of a run.

Every process of a launch other than the driver (the buffer, each learner rank, each actor,
the warm-start and held-out-evaluation children) calls `redirect_output` first thing (a Ray
worker through `own_log`): its file descriptors 1 and 2 then point at its own log file, so
everything it or its libraries write lands there — Python prints, `logging` (vLLM's own
handler writes to sys.stdout), `warnings`, C/C++ libraries writing to the descriptors
directly, and child processes it starts later (vLLM's engine core inherits them). The launch's console keeps only the
launch's own lines (run/output/console.py); `--verbose` (`logging.verbose`) skips the redirection
and Ray forwards every worker's output to the console.

A restarted process appends to the same file after a header line naming its pid, so one
file tells an actor's whole story. Files are bounded: when one grows past `MAX_LOG_BYTES`,
its content moves to `<name>.log.1` (replacing the older one) and the file starts again
from empty. The descriptors are opened with O_APPEND, so every writer, the vLLM child
included, continues at the new end without reopening anything. The launch reads what the
processes write as it comes (`LogFollower`), and a dead one's last exception (`tail_error`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_r1_async.config import RunConfig

MAX_LOG_BYTES = 32 * 1024 * 1024
"""A log file's size at which it is rotated (one older copy is kept: at most ~2x this)."""
_CHECK_EVERY_S = 5.0
_FOLLOW_BYTES = 4 << 20


def log_file(log_dir: str | Path, role: str, index: int | None = None) -> Path:
    """RUN_DIR/logs/<role>-<index>.log (or <role>.log for a process that has no index)."""
    name = role if index is None else f"{role}-{index}"
    return Path(log_dir) / f"{name}.log"


def redirect_output(path: str | Path, level: int = logging.INFO) -> Path:
    """Point this process's stdout and stderr (descriptors 1 and 2) at `path` (appending),
    send `logging` records at `level` and up and `warnings` there too, and keep the file
    bounded (`MAX_LOG_BYTES`). Returns the file's absolute path."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"===== {stamp} {path.stem} pid {os.getpid()} started", flush=True)
    root = logging.getLogger()
    root.setLevel(min(root.level or level, level))
    if not any(getattr(h, "_agent_r1_async_log", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._agent_r1_async_log = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    logging.captureWarnings(True)
    _start_bounding(path)
    return path


def own_log(cfg: RunConfig, log_dir: str | None, role: str, index: int | None = None) -> None:
    """This Ray worker's output goes to RUN_DIR/logs/<role>[-<index>].log (`redirect_output`),
    not to the launch's console; with `logging.verbose` Ray forwards it to the console instead."""
    if log_dir and not cfg.logging.verbose:
        redirect_output(log_file(log_dir, role, index))


def log_to(path: str) -> None:
    """This process's `agent_r1_async` log records (INFO and up) go to `path`; WARNING and up
    also to stderr (which Ray forwards to the launcher's console) unless logging is set up."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pkg = logging.getLogger("agent_r1_async")
    pkg.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not any(getattr(h, "baseFilename", None) == str(Path(path).resolve()) for h in pkg.handlers):
        file = logging.FileHandler(path)
        file.setFormatter(fmt)
        pkg.addHandler(file)
    if not logging.getLogger().handlers and not any(
        type(h) is logging.StreamHandler for h in pkg.handlers
    ):
        console = logging.StreamHandler()
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        pkg.addHandler(console)


_bounded: set[Path] = set()


def _start_bounding(path: Path) -> None:
    if path in _bounded:
        return
    _bounded.add(path)
    threading.Thread(target=_bound_forever, args=(path,), name="log-bound", daemon=True).start()


def _bound_forever(path: Path) -> None:
    while True:
        time.sleep(_CHECK_EVERY_S)
        with contextlib.suppress(OSError):
            bound(path)


def bound(path: Path, max_bytes: int = MAX_LOG_BYTES) -> bool:
    """Rotate `path` to `path.1` when it is larger than `max_bytes`; True when it did.

    Copy then truncate (not rename): the writers' descriptors stay on the same file, and with
    O_APPEND their next write lands at the new end. Lines written between the copy and the
    truncation are lost; at these sizes that is a few lines per rotation."""
    if path.stat().st_size <= max_bytes:
        return False
    shutil.copyfile(path, path.with_name(path.name + ".1"))
    os.truncate(path, 0)
    return True


def tail_error(path: str | Path, max_bytes: int = 64 * 1024) -> str | None:
    """The last exception line of a Python traceback in the log's tail (`ValueError: bad`),
    or None: how a dead process's own log says what ended it."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - max_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not any(line.startswith("Traceback (most recent call last)") for line in lines):
        return None
    start = max(i for i, line in enumerate(lines) if line.startswith("Traceback (most recent"))
    for line in lines[start + 1:]:
        if line and not line.startswith((" ", "\t", "Traceback")):
            return line.strip()
    return None


class LogFollower:
    """The lines appended to a log file since the last call (a rotated file, `bound`, is read
    again from its start). At most `_FOLLOW_BYTES` are read per call: after a
    larger burst, the older part of it is skipped."""

    def __init__(self, path: Path, from_end: bool = False) -> None:
        """`from_end`: what the file holds already is not new (a resumed run's old log)."""
        self.path = path
        self.offset = 0
        if from_end:
            with contextlib.suppress(OSError):
                self.offset = path.stat().st_size
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
            if size < self.offset:  # rotated: the file started again from empty
                self.offset, self._partial = 0, b""
            if size == self.offset:
                return []
            if size - self.offset > _FOLLOW_BYTES:
                self.offset, self._partial = size - _FOLLOW_BYTES, b""
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return []
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its end
        return [line.decode("utf-8", "replace") for line in lines]


def quiet_driver(path: str | Path) -> None:
    """The launch driver's own `logging` records (W&B's, and Ray's driver notices once
    run/processes/ray_cluster.py `quiet_ray_driver` hands them to `logging`) and `warnings` go
    to `path` instead of the console; its stdout stays the console (run/output/console.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    if any(getattr(h, "baseFilename", None) == str(path.resolve()) for h in root.handlers):
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    # multiprocessing's resource tracker (started once, for the spawned warm-start and
    # evaluation children) reports vLLM's leaked shared memory on its stderr at exit.
    from multiprocessing import resource_tracker

    with descriptors_to(path):
        resource_tracker.ensure_running()


@contextlib.contextmanager
def descriptors_to(path: str | Path) -> Iterator[None]:
    """Descriptors 1 and 2 of this process point at `path` inside the block, and are restored
    after it. Around `ray.init`: what Ray's driver code and the processes it starts then (GCS,
    raylet, their notices, inheriting these descriptors) write goes to the file for good."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for d in (fd, *saved):
            os.close(d)


def log_exception(path: str | Path) -> Path | None:
    """Append the exception being handled, with its traceback, to `path`; returns the path, or
    None when it could not be written (a full disk): the caller's one line must not point at a
    log that lacks the traceback, nor fail on it."""
    import traceback

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} launch failed:\n"
                    f"{traceback.format_exc()}")
    except OSError:
        return None
    return path

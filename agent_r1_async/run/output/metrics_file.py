"""`RUN_DIR/metrics.jsonl`: one JSON object a line, written whole, read back in one place.

A line is a record: `update` (the learner version it belongs to), `time` (seconds since the
logger started) and flat numeric metrics keyed like `reward/mean`; a histogram is an object
(run/output/histograms.py). A training record has `version`; a held-out or periodic
evaluation's has not. `JsonlFile` writes it so that a line is never left torn by this process;
`read_records` is the file's one reader (the report's plots, the launch's "which updates are
logged already"), whose callers choose what a line that does not parse means.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any


class JsonlFile:
    """An append-only JSON-lines file whose lines are on disk as soon as they are written.

    Each line is one write(2) of the whole line to a descriptor opened with O_APPEND and no
    buffer in this process, so a line is in the kernel (page cache) when `write_line` returns:
    a process SIGKILLed right after loses nothing it wrote, and never leaves half a line. A
    write that fails part-way (a full disk) is cut back off the file, so no torn line stays; a
    line torn some other way (the machine lost power) is closed with a newline on opening, so
    the next line starts on a line of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        if self._file.tell() > 0 and not _ends_with_newline(path):
            self._file.write(b"\n")

    def write_line(self, text: str) -> None:
        """Append `text` and a newline; raises OSError (the file is then as it was)."""
        view = memoryview((text + "\n").encode())
        start = os.fstat(self._file.fileno()).st_size
        try:
            while view:
                written = self._file.write(view)
                if not written:
                    raise OSError(errno.EIO, "the write made no progress", str(self.path))
                view = view[written:]
        except OSError:
            with contextlib.suppress(OSError):  # freeing blocks works on a full disk too
                os.ftruncate(self._file.fileno(), start)
            raise

    def close(self) -> None:
        self._file.close()


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def read_records(path: Path, skip_unparsed: bool = False, errors: str = "strict") -> list[Any]:
    """The JSON value of every non-blank line of the metrics file at `path`, in file order.

    A line that does not parse is skipped with `skip_unparsed`; without it only the last line
    may fail to (a line torn mid-write), and any other raises `json.JSONDecodeError`. `errors`
    is how bytes that are not UTF-8 decode (`str.decode`). An OSError reading the file (a
    missing one) is raised."""
    lines = path.read_text("utf-8", errors).splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if not skip_unparsed and n != len(lines):  # a torn last line is expected mid-write
                raise
    return rows


def logged_updates(path: Path) -> set[int]:
    """The updates with a training record (one that has `version`) in the metrics file at
    `path`; a line that does not parse is skipped, a file that cannot be read has none."""
    try:
        records = read_records(path, skip_unparsed=True, errors="replace")
    except OSError:
        return set()
    return {int(r.get("update", 0)) for r in records if isinstance(r, dict) and "version" in r}


def last_logged_update(path: Path) -> int:
    """The highest update with a training record in the metrics file at `path` (0: none yet,
    or no file). A line cut short by a crash is skipped."""
    if not path.exists():
        return 0
    records = read_records(path, skip_unparsed=True)
    return max([0, *(int(r.get("update", 0)) for r in records
                     if isinstance(r, dict) and "version" in r)])

"""When each start-up phase of a launch ended: RUN_DIR/startup.json.

    {"started": 1764140000.12, "phases": [["preflight", 1764140001.3], ["warm start", ...],
     ["ray", ...], ["processes", ...], ["first update", ...]]}

Times are wall-clock (`time.time()`), so a caller that started the command can subtract its
own start; `started` is when the launch function began. The file is rewritten after each
phase (a launch that fails at start shows how far it got); bench/bench_startup.py reads it.
A resumed launch writes its own.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path


class StartupClock:
    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else started
        self.phases: list[tuple[str, float]] = []
        self.path: Path | None = None

    def write_to(self, run_dir: Path) -> None:
        self.path = run_dir / "startup.json"
        self._write()

    def mark(self, phase: str) -> None:
        """`phase` ended now (only the first mark of a name counts)."""
        if any(name == phase for name, _ in self.phases):
            return
        self.phases.append((phase, time.time()))
        self._write()

    def seconds(self) -> dict[str, float]:
        """Each phase's end, in seconds since `started`."""
        return {name: t - self.started for name, t in self.phases}

    def _write(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):  # a convenience record: a full disk shows elsewhere
            self.path.write_text(json.dumps({"started": self.started, "phases": self.phases}))

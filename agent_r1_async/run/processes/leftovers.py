"""What a SIGKILLed launch leaves of its local Ray, and `--resume` ending it.

A launch's embedded Ray mostly dies with its launcher (its GCS and raylet are tied to it, and
the workers follow the raylet), but Ray's dashboard and runtime-env agents outlive a SIGKILLed
launcher, and its private session directory stays in the temp dir. So a launch that started a
local Ray writes `RUN_DIR/ray-processes.json` once its processes are up: the launcher's pid
and each of its descendants' pid, start time and name, and the private directory. A clean stop
removes the file. `launch --resume RUN_DIR` reads a file it finds there (the launch before was
killed), ends every recorded process still alive, each by its pid *and* start time (a reused
pid is someone else's), removes the directory, and names what it ended in one console line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

RECORD = "ray-processes.json"
_SAME_START_S = 0.05
"""Two start times this close are the same process (psutil rounds to 10 ms)."""


def record_local_ray(run_dir: Path, temp_dir: str | None) -> None:
    """Write what this launch's local Ray runs (module docstring)."""
    import psutil

    me = psutil.Process()
    procs = []
    for p in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            procs.append({"pid": p.pid, "start": p.create_time(), "name": p.name()})
    record = {"launcher": {"pid": me.pid, "start": me.create_time()}, "processes": procs,
              "temp_dir": temp_dir}
    tmp = run_dir / f"{RECORD}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, run_dir / RECORD)


def forget_local_ray(run_dir: Path) -> None:
    """The launch stopped its Ray itself: nothing is left to end."""
    with contextlib.suppress(FileNotFoundError):
        (run_dir / RECORD).unlink()


def _alive(entry: dict[str, Any]) -> Any:
    """The process `entry` names, if it still runs (same pid, same start time), else None."""
    import psutil

    try:
        p = psutil.Process(int(entry["pid"]))
        if abs(p.create_time() - float(entry["start"])) < _SAME_START_S:
            return p
    except (psutil.Error, KeyError, TypeError, ValueError):
        pass
    return None


def reap_left_behind(run_dir: Path) -> list[str]:
    """End what a killed launch of `run_dir` left of its local Ray; "name (pid N)" of each
    process ended. Nothing while that launcher still runs."""
    import psutil

    path = run_dir / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if _alive(record.get("launcher", {})) is not None:
        return []
    ended, found = [], []
    for entry in record.get("processes", []):
        p = _alive(entry)
        if p is not None:
            with contextlib.suppress(psutil.Error):
                p.kill()
                found.append(p)
                ended.append(f"{entry.get('name', '?')} (pid {entry['pid']})")
    psutil.wait_procs(found, timeout=10)
    temp = record.get("temp_dir")
    if isinstance(temp, str) and os.path.basename(temp).startswith("ar1-ray-"):
        shutil.rmtree(temp, ignore_errors=True)
    forget_local_ray(run_dir)
    return ended

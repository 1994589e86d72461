"""A CPU's bf16 verdict: the flag pre-filter, then the micro-benchmark's ratio, cached.

bf16 is chosen when it runs at least `BF16_MARGIN` (1.1) times as fast as fp32 (bf16/probe.py
measures it): bf16 has a cost of its own (the engine and the learner round differently, a
mismatch the importance weights correct; BENCHMARKS.md "Precision" measures what it costs per
update), and a sub-second micro-benchmark on a shared machine is noisy, so a gain of a few
percent is no evidence that bf16 pays for that cost.

Each verdict (the ratio bf16 / fp32 speed) is cached in `precision.json` under the project's
cache directory (`$AGENT_R1_ASYNC_CACHE`, else ~/.cache/agent_r1_async), keyed by the op, the
CPU model, the torch (and vLLM) version, the shape and the thread count. The first process
of a launch that needs it measures it under a file lock: normally the launch driver, before
any other process starts, in a spawned child process when torch (or vLLM) is not imported in
it already, so the driver stays light. The learner, the actors, the warm start and the
memory preflight then read the same cached verdict, so every process of a machine agrees.
A miss costs the measuring process its imports besides the measurement, once per machine and
model (BENCHMARKS.md, "bf16 vs fp32 by machine"). A corrupt or unwritable cache does not stop
a launch: the process measures, and the verdict's reason says so. Delete the file to measure
again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_r1_async.bf16.hardware import bf16_support
from agent_r1_async.bf16.probe import Probe, Timer, run_probe

BF16_MARGIN = 1.1
"""bf16 is chosen when its measured speed is at least this many times fp32's (module docstring)."""

CACHE_FILE = "precision.json"
LOCK_WAIT_S = 60.0
"""How long a process waits for another one's measurement (seconds at most, imports included)
before it measures without the lock."""


@dataclass(frozen=True)
class Verdict:
    """bf16 or not, why (one clause for the console), and the measured speed ratio."""

    bf16: bool
    why: str
    ratio: float | None = None
    """bf16 speed / fp32 speed of the probe (None where nothing was measured)."""


def _measured_why(probe: Probe, ratio: float, how: str) -> str:
    why = f"bf16 {probe.label()} {ratio:.2f}x fp32 on this CPU, {how}"
    if 1.0 < ratio < BF16_MARGIN:
        why += f"; bf16 needs {BF16_MARGIN:.2f}x"
    return why


def cpu_verdict(probe: Probe, flags: frozenset[str] | None = None,
                timer: Timer | None = None) -> Verdict:
    """bf16 or fp32 for `probe` on this CPU: the flag pre-filter, then the cached or measured
    ratio (module docstring). `flags` replaces the CPU's own and `timer` the measurement
    (tests)."""
    ok, why = bf16_support("cpu", flags)
    if not ok:
        return Verdict(False, f"fp32 because {why}")
    path = _cache_path()
    memo_key = (str(path), probe.key())
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    notes: list[str] = []
    with _locked(path, notes):
        entries, problem = _read_cache(path)
        entry = entries.get(probe.key())
        if entry is not None:
            ratio, how = float(entry["ratio"]), "cached"
            if entry.get("note"):  # what the measuring process said of it (a torch stand-in)
                notes.append(str(entry["note"]))
        else:
            if problem:
                notes.append(f"{problem}: re-measured")
            t0 = time.perf_counter()
            ratio, note = run_probe(probe, timer)
            how = "measured"
            if note:
                notes.append(note)
            stored = {"ratio": round(ratio, 4), "seconds": round(time.perf_counter() - t0, 3),
                      "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if note:
                stored["note"] = note
            if path is None:
                notes.append("not cached: no cache directory")
            else:
                written = _write_cache(path, probe.key(), stored)
                if written:
                    notes.append(written)
    verdict = Verdict(ratio >= BF16_MARGIN,
                      "; ".join([_measured_why(probe, ratio, how), *notes]), ratio)
    _MEMO[memo_key] = verdict
    return verdict


_MEMO: dict[tuple[str, str], Verdict] = {}
"""This process's verdicts (by cache file and key): later calls reuse them as decided, without
reading the file again."""


def _cache_path() -> Path | None:
    from agent_r1_async.models import cache_dir

    try:
        return cache_dir() / CACHE_FILE
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path | None, notes: list[str]) -> Iterator[None]:
    """The cache's lock file held (two processes measuring at once could disagree); without the
    lock where it cannot be created or stays held past `LOCK_WAIT_S` (a hung holder), noted."""
    if path is None:
        yield
        return
    try:
        fh = open(path.with_name(path.name + ".lock"), "w")  # noqa: SIM115
    except OSError as e:
        notes.append(f"no cache lock ({e})")
        yield
        return
    with fh:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    notes.append(f"no cache lock (held elsewhere over {LOCK_WAIT_S:g} s)")
                    yield
                    return
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_cache(path: Path | None) -> tuple[dict[str, dict[str, Any]], str]:
    """(the cache's valid entries, what was wrong with the file or "")."""
    if path is None:
        return {}, ""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, ""
    except OSError as e:
        return {}, f"the cache {path} is unreadable ({e})"
    try:
        verdicts = json.loads(text)["verdicts"]
        if not isinstance(verdicts, dict):
            raise TypeError("verdicts is not a mapping")
    except (ValueError, KeyError, TypeError) as e:
        return {}, f"the cache {path} is corrupt ({type(e).__name__})"
    valid = {}
    for k, v in verdicts.items():
        try:
            if float(v["ratio"]) > 0:
                valid[k] = v
        except (KeyError, TypeError, ValueError):
            pass
    return valid, ""


def _write_cache(path: Path, key: str, entry: dict[str, Any]) -> str:
    """Add `entry` to the cache (atomically: a temporary file renamed); "" or why not."""
    entries, _ = _read_cache(path)
    entries[key] = entry
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"verdicts": entries}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return f"not cached ({e})"
    return ""

"""Run directories: `RUN_ROOT/NAME-STAMP[-n]/{checkpoints,logs,buffer}` plus the resolved config."""

from __future__ import annotations

import time
from pathlib import Path

from agent_r1_async.config import ConfigError, RunConfig, dump_config

STAMP = "%Y%m%d-%H%M%S"
"""The run directory's creation time in its name, local time (metrics.jsonl's "time" counts
from about then)."""


def make_run_dir(cfg: RunConfig) -> Path:
    """A new RUN_ROOT/NAME-STAMP[-n] with its subdirectories and config.yaml. The preflight
    checked the run root; one that became unwritable since (removed, remounted, full) is the
    same one-line `ConfigError` naming `launch.run_root`, not a traceback."""
    stamp = time.strftime(STAMP)
    run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}-{n}"
    try:
        for sub in ("checkpoints", "logs", "buffer"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(cfg))
    except OSError as e:
        failed = Path(str(e.filename)) if e.filename else run_dir
        where = "" if failed.is_relative_to(run_dir) else f" (at {str(failed)!r})"
        raise ConfigError(
            f"launch.run_root: cannot make the run directory {str(run_dir)!r}{where}: "
            f"{e.strerror or e}; choose a writable directory") from None
    return run_dir.resolve()


def created_at(run_dir: Path) -> float:
    """When `make_run_dir` made `run_dir` (epoch seconds, to the second), read off its name:
    NAME-STAMP or, when that name was taken, NAME-STAMP-n."""
    parts = run_dir.name.split("-")
    for end in (len(parts), len(parts) - 1):  # without, then with, the -n suffix
        if end >= 2:
            try:
                return time.mktime(time.strptime("-".join(parts[end - 2:end]), STAMP))
            except ValueError:
                continue
    raise ValueError(f"{run_dir.name}: not a run directory name (NAME-{STAMP}[-n])")

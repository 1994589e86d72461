"""Run directories: `RUN_ROOT/NAME-STAMP[-n]/{checkpoints,logs,buffer}` plus the resolved config."""

from __future__ import annotations

import time
from pathlib import Path

from agent_r1_async.config import RunConfig, dump_config


def make_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}-{n}"
    for sub in ("checkpoints", "logs", "buffer"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir.resolve()

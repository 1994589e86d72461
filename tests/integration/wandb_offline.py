"""Reading an offline W&B run back with W&B's own reader, not by grepping its files.

`wandb leet inspect --json RUN.wandb` (wandb-core's reader of the run's transaction log, in
the installed wandb) prints every record of the `.wandb` file as one JSON object a line. A
history record's item holds each logged key flattened (`key._type`, `key.path`, ...); a
logged `wandb.Table` is a `table-file` whose `path` names its JSON (columns and data) under
the run's `files/` directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WANDB = str(Path(sys.executable).parent / "wandb")


def records(wandb_file: Path) -> list[dict[str, Any]]:
    """Every record of an offline run's `.wandb` file, as W&B reads it."""
    out = subprocess.run(
        [WANDB, "leet", "inspect", "--json", str(wandb_file)], capture_output=True, text=True,
        timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                          "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"})
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def history(wandb_file: Path) -> list[dict[str, Any]]:
    """The run's history rows (one per logged step), in order."""
    return [r["history"]["item"] for r in records(wandb_file) if r.get("type") == "history"]


def table(run_files: Path, item: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The table logged under `key` in a history row: {"columns": [...], "data": [[...]]},
    None when the row has none."""
    if item.get(f"{key}._type") != "table-file":
        return None
    return json.loads((run_files / item[f"{key}.path"]).read_text())

"""Running the `agent-r1-async` CLI in a subprocess the way the launch tests do: the
environment (W&B offline, no Ray usage stats, no inherited `RAY_ADDRESS`), a tiny config
that trains on an example env, and a launch that must succeed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "agent_r1_async.cli"]


def cli_env(**extra: str) -> dict[str, str]:
    """This process's environment for a CLI child, plus `extra`."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
               RAY_USAGE_STATS_ENABLED="0", **extra)
    env.pop("RAY_ADDRESS", None)
    return env


def tiny_config_with_env(tmp_path: Path, example: str, name: str) -> Path:
    """configs/tiny.yaml with the env section of `configs/<example>` (2 turns), named `name`,
    its runs under `tmp_path`; the written file's path."""
    cfg = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    env = yaml.safe_load((ROOT / "configs" / example).read_text())["env"]
    cfg["env"] = {**env, "max_turns": 2}
    cfg["launch"] = {**cfg.get("launch", {}), "name": name, "run_root": str(tmp_path)}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def launch_ok(*args: str, timeout: float) -> tuple[Path, str]:
    """`launch *args`, which must exit 0; (its run directory, its stdout)."""
    out = subprocess.run([*CLI, "launch", *args], capture_output=True, text=True,
                         timeout=timeout, env=cli_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return Path(out.stdout.split("[launch] run directory: ")[-1].strip()), out.stdout

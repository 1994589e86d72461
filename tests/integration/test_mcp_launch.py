"""A tiny launch trains end to end with its tools served by the example MCP server, and
`envs check` passes on the shipped MCP config (both start the real server over stdio)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "agent_r1_async.cli"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    return env


def _tiny_mcp_config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    example = yaml.safe_load((ROOT / "configs/mcp_example.yaml").read_text())
    cfg["env"] = {**example["env"], "max_turns": 2}
    cfg["launch"] = {**cfg.get("launch", {}), "name": "tiny-mcp", "run_root": str(tmp_path)}
    path = tmp_path / "tiny_mcp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_envs_check_passes_on_the_mcp_example():
    out = subprocess.run([*CLI, "envs", "check", "--config", "configs/mcp_example.yaml"],
                         capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK"
    oracle = [ln for ln in lines if ln.strip().startswith("oracle")]
    assert len(oracle) == 2 and all("outcome 1 (success 1" in ln for ln in oracle)


def test_envs_check_names_a_server_that_does_not_start():
    out = subprocess.run(
        [*CLI, "envs", "check", "--config", "configs/mcp_example.yaml",
         "--set", "env.args.servers=[{name: units, command: [python, examples/nope.py]}]"],
        capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT)
    assert out.returncode != 0
    failed = [ln for ln in out.stdout.splitlines() if "FAILED" in ln and "MCP server" in ln]
    assert len(failed) == 1, out.stdout + out.stderr
    assert "MCP server 'units' (python examples/nope.py) did not start" in failed[0]
    assert "nope.py" in failed[0].split("stderr: ")[-1]  # python's own "can't open file"


def test_tiny_launch_trains_on_the_mcp_example(tmp_path: Path):
    out = subprocess.run([*CLI, "launch", "--config", str(_tiny_mcp_config(tmp_path))],
                         capture_output=True, text=True, timeout=600, env=_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = Path(out.stdout.split("[launch] run directory: ")[-1].strip())
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:  # the episodes ran on the MCP env, none failed on it
        assert "reward/env/mcp_tools" in r and r["episodes/status/ok"] == 1.0


def test_launch_preflight_names_a_server_that_does_not_start():
    from agent_r1_async.config import ConfigError, config_from_dict
    from agent_r1_async.run.preflight.checks import preflight

    cfg = config_from_dict({
        "model": {"name_or_path": "tiny-random-llama"}, "engine": {"backend": "hf"},
        "actors": {"num_actors": 2},
        "env": {"name": "mcp_tools", "args": {
            "servers": [{"name": "units", "command": ["python", "-c", "raise SystemExit(3)"]}],
            "tasks": "examples.mcp_units_server:tasks"}}})
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    assert str(err.value) == ("MCP server 'units' (python -c raise SystemExit(3)) did not start: "
                              "MCPError: Connection closed")

"""A tiny launch trains end to end with its tools served by the example MCP server, and
`envs check` passes on the shipped MCP config (both start the real server over stdio)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli_runs import CLI, ROOT, cli_env, launch_ok, tiny_config_with_env


def test_envs_check_passes_on_the_mcp_example():
    out = subprocess.run([*CLI, "envs", "check", "--config", "configs/mcp_example.yaml"],
                         capture_output=True, text=True, timeout=300, env=cli_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK"
    oracle = [ln for ln in lines if ln.strip().startswith("oracle")]
    assert len(oracle) == 2 and all("outcome 1 (success 1" in ln for ln in oracle)


def test_envs_check_names_a_server_that_does_not_start():
    out = subprocess.run(
        [*CLI, "envs", "check", "--config", "configs/mcp_example.yaml",
         "--set", "env.args.servers=[{name: units, command: [python, examples/nope.py]}]"],
        capture_output=True, text=True, timeout=300, env=cli_env(), cwd=ROOT)
    assert out.returncode != 0
    failed = [ln for ln in out.stdout.splitlines() if "FAILED" in ln and "MCP server" in ln]
    assert len(failed) == 1, out.stdout + out.stderr
    assert "MCP server 'units' (python examples/nope.py) did not start" in failed[0]
    assert "nope.py" in failed[0].split("stderr: ")[-1]  # python's own "can't open file"


def test_tiny_launch_trains_on_the_mcp_example(tmp_path: Path):
    config = tiny_config_with_env(tmp_path, "mcp_example.yaml", "tiny-mcp")
    run_dir, _ = launch_ok("--config", str(config), timeout=600)
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

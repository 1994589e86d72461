"""The `world` env trains end to end in a tiny launch (configs/tiny.yaml with
configs/world.yaml's env, 4 turns): the run finishes its updates and logs the world's
episode metrics and the horizon aggregates."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.integration.cli_runs import launch_ok, tiny_config_with_env


def test_a_tiny_world_launch_trains_and_logs_horizon_metrics(tmp_path: Path):
    config = tiny_config_with_env(tmp_path, "world.yaml", "tiny-world")
    cfg = yaml.safe_load(config.read_text())
    cfg["env"]["max_turns"] = 4
    cfg["env"]["args"] = {**cfg["env"]["args"], "num_train": 8, "num_dev": 4, "num_test": 4}
    cfg["model"]["max_model_len"] = 1024  # the world's instruction is ~470 tokens
    cfg["actors"]["num_actors"] = 1
    config.write_text(yaml.safe_dump(cfg))
    run_dir, _ = launch_ok("--config", str(config), timeout=420)
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:
        assert "reward/env/world" in r and r["env/optimal_len"] >= 10
        assert 1 <= r["episodes/steps_p50"] <= r["episodes/steps_p99"] <= 4
        assert any(k.startswith("env/success_by_horizon/le_") for k in r)
        assert not r.get("episodes/status/env_error") and not r.get("episodes/status/timeout")

"""The textworld_express env end to end: `envs check` on a shipped config through the CLI, and
a tiny launch (tiny random model, HF engine, 2 actors, each with its own JVM) that trains on
CoinCollector games (~25 s here)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.cli_runs import CLI, ROOT, cli_env, launch_ok, tiny_config_with_env
from tests.unit.envs.twx.needs import require_twx


@pytest.fixture(autouse=True)
def _twx() -> None:
    require_twx()


def test_envs_check_passes_on_the_cooking_config():
    out = subprocess.run([*CLI, "envs", "check", "--config", "configs/twx_cooking.yaml"],
                         capture_output=True, text=True, timeout=300, env=cli_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK"
    oracle = [ln for ln in lines if ln.strip().startswith("oracle")]
    assert len(oracle) == 2 and all(", done, process 1, outcome 1 (steps " in ln for ln in oracle)
    junk = [ln for ln in lines if ln.strip().startswith("junk")]
    # 40 actions without a call: 40 x -0.1, cut at env.max_turns
    assert len(junk) == 2 and all("done, process -4, outcome 0" in ln and "truncated 1" in ln
                                  for ln in junk)


def test_tiny_launch_trains_on_coin_games(tmp_path: Path):
    config = tiny_config_with_env(tmp_path, "twx_coin.yaml", "tiny-twx")
    cfg = yaml.safe_load(config.read_text())
    cfg["model"]["max_model_len"] = 1024  # the opening prompt alone is ~370 tokens
    config.write_text(yaml.safe_dump(cfg))
    run_dir, _ = launch_ok("--config", str(config), timeout=420)
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:
        assert not r.get("episodes/status/env_error") and not r.get("episodes/status/timeout")
        # the env's metrics reach the run: 2 actions per episode (env.max_turns 2), the
        # gold-path length of coin games of 4-7 rooms beside them
        assert r["env/steps"] == 2.0 and 2.0 <= r["env/optimal_len"] <= 9.0
        for key in ("env/score", "env/success", "env/invalid_calls", "env/invalid_commands",
                    "reward/env/textworld_express"):
            assert key in r, key

"""`launch` with an env whose every step raises stops with that error.

Without the check the launcher would wait out `learner.sample_timeout_s` (600 s) and end with
`TimeoutError: no batch ...`, the env's exception nowhere. Each actor logs the first
occurrence (console via Ray, RUN_DIR/logs/actor-N.log) and the launcher stops once every
actor's recent episodes all failed: tiny.yaml, 2 actors, stop_after_failed_episodes 4 -> each
actor's last 2 episodes (one group of 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BROKEN_ENV = '''
from agent_r1_async.envs.arithmetic import ArithmeticEnv
from agent_r1_async.envs.base import Observation


class Broken:
    async def reset(self, task):
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action):
        raise ValueError("unit table missing")


class BrokenEnv(ArithmeticEnv):
    def make(self):
        return Broken()
'''


@pytest.mark.slow
def test_launch_stops_with_the_env_error_when_every_episode_fails(tmp_path: Path):
    (tmp_path / "broken_env.py").write_text(BROKEN_ENV)
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
               RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
         str(ROOT / "configs/tiny.yaml"), "--set", f"launch.run_root={tmp_path / 'runs'}",
         "--set", "env.name=broken_env:BrokenEnv", "--set", "launch.stop_after_failed_episodes=4"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-r1-async: the last 4 episodes all failed"), last
    assert "env.step: ValueError: unit table missing" in last
    assert elapsed < 180, elapsed  # not learner.sample_timeout_s (600 s)
    run_dir = Path(out.stdout.split("[launch] run directory: ")[1].splitlines()[0].strip())
    logs = [(run_dir / "logs" / f"actor-{i}.log").read_text() for i in range(2)]
    for text in logs:  # logged once per actor, with the traceback, then only counted
        assert text.count("step failed on task") == 1
        assert 'raise ValueError("unit table missing")' in text
    # Said on the console once, in one line naming the actor's log (the traceback is there).
    said = [ln for ln in out.stderr.splitlines() if ln.startswith("[launch] error: actor-")]
    assert said and all("env error ValueError: env_error in env broken_env:BrokenEnv" in ln
                        and ln.endswith(".log)") for ln in said), out.stderr[-3000:]

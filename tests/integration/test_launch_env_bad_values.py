"""`launch` with an env that only *returns* bad values (a NaN outcome) stops like one that
raises: each episode fails at the rollout's boundary as env_error naming the field, the
failures count toward `launch.stop_after_failed_episodes`, and the console says so in one line.
The buffer refuses nothing: no record of a bad episode reaches it. The env's first step also
blocks in synchronous code for 1.5 s: the warning reaches the launch's console once.

tiny.yaml, 2 actors, stop_after_failed_episodes 4 -> each actor's last 2 episodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NAN_ENV = '''
import time

from agent_r1_async.envs.arithmetic import ArithmeticEnv
from agent_r1_async.envs.base import Observation, StepResult

_slept = False


class NanOutcome:
    async def reset(self, task):
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action):
        global _slept
        if not _slept:  # once per actor process: a blocking call inside async code
            _slept = True
            time.sleep(1.5)
        return StepResult(Observation([]), 0.0, True, outcome_reward=float("nan"))


class NanEnv(ArithmeticEnv):
    def make(self):
        return NanOutcome()
'''
LINE = "env.step: StepResult.outcome_reward is nan, expected a finite real number"


@pytest.mark.slow
def test_launch_stops_on_an_env_that_returns_nan_with_the_field_on_the_console(tmp_path: Path):
    (tmp_path / "nan_env.py").write_text(NAN_ENV)
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
               RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
         str(ROOT / "configs/tiny.yaml"), "--set", f"launch.run_root={tmp_path / 'runs'}",
         "--set", "env.name=nan_env:NanEnv", "--set", "launch.stop_after_failed_episodes=4"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-r1-async: the last 4 episodes all failed "
                           "(launch.stop_after_failed_episodes=4): env_error in env "
                           "nan_env:NanEnv (task arith-train-"), last
    assert last.endswith(f"): {LINE}"), last
    assert elapsed < 180, elapsed  # not learner.sample_timeout_s (600 s)
    said = [ln for ln in out.stderr.splitlines() if ln.startswith("[launch] error: actor-")]
    assert said and all("env error ValueError: env_error in env nan_env:NanEnv (task " in ln
                        and LINE in ln for ln in said), out.stderr[-3000:]
    assert "\x1b[" not in out.stdout + out.stderr  # no terminal colour codes
    blocked = [ln for ln in out.stdout.splitlines()
               if "NanOutcome.step blocked its event loop for 1." in ln]
    assert len(blocked) == 1 and blocked[0].startswith("[launch] actor-"), out.stdout[-3000:]
    assert blocked[0].endswith(".log"), blocked
    run_dir = Path(out.stdout.split("[launch] run directory: ")[1].splitlines()[0].strip())
    assert "record refused" not in (run_dir / "logs" / "buffer.log").read_text()

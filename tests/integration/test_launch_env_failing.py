"""`launch` with an env whose every step raises stops with that error.

Without the check the launcher would wait out `learner.sample_timeout_s` (600 s) and end with
`TimeoutError: no batch ...`, the env's exception nowhere. Each actor logs the first
occurrence (console via Ray, RUN_DIR/logs/actor-N.log) and the launcher stops once every
actor's recent episodes all failed: tiny.yaml, 2 actors, stop_after_failed_episodes 4 -> each
actor's last 2 episodes (one group of 2).

An env that only *returns* bad values (a NaN outcome) stops the same way: each episode fails at
the rollout's boundary as env_error naming the field, the buffer refuses nothing, and a step
that blocks in synchronous code for 1.5 s is warned about once on the console.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli_runs import ROOT, cli_env

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


def _launch_env(tmp_path: Path, module: str, source: str, env_class: str) -> Any:
    """A tiny launch of `module:env_class` (written from `source`), stopping after 4 failed
    episodes: the completed process. Its 240 s guard against a hang is well under the 600 s
    the launch would wait without the check; its last line says which ended it."""
    (tmp_path / f"{module}.py").write_text(source)
    env = cli_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    out = subprocess.run(
        [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
         str(ROOT / "configs/tiny.yaml"), "--set", f"launch.run_root={tmp_path / 'runs'}",
         "--set", f"env.name={module}:{env_class}", "--set", "launch.stop_after_failed_episodes=4"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    assert "no batch after learner.sample_timeout_s" not in out.stderr  # not that wait
    return out


@pytest.mark.slow
def test_launch_stops_with_the_env_error_when_every_episode_fails(tmp_path: Path):
    out = _launch_env(tmp_path, "broken_env", BROKEN_ENV, "BrokenEnv")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-r1-async: the last 4 episodes all failed"), last
    assert "env.step: ValueError: unit table missing" in last
    run_dir = Path(out.stdout.split("[launch] run directory: ")[1].splitlines()[0].strip())
    logs = [(run_dir / "logs" / f"actor-{i}.log").read_text() for i in range(2)]
    for text in logs:  # logged once per actor, with the traceback, then only counted
        assert text.count("step failed on task") == 1
        assert 'raise ValueError("unit table missing")' in text
    # Said on the console once, in one line naming the actor's log (the traceback is there).
    said = [ln for ln in out.stderr.splitlines() if ln.startswith("[launch] error: actor-")]
    assert said and all("env error ValueError: env_error in env broken_env:BrokenEnv" in ln
                        and ln.endswith(".log)") for ln in said), out.stderr[-3000:]


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


def test_launch_stops_on_an_env_that_returns_nan_with_the_field_on_the_console(tmp_path: Path):
    out = _launch_env(tmp_path, "nan_env", NAN_ENV, "NanEnv")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-r1-async: the last 4 episodes all failed "
                           "(launch.stop_after_failed_episodes=4): env_error in env "
                           "nan_env:NanEnv (task arith-train-"), last
    assert last.endswith(f"): {LINE}"), last
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

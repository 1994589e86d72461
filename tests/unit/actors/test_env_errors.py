"""Env exceptions are logged once, counted per kind, and a run whose
every recent episode fails is detected (the launcher's check, `failing_actors`)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.actors.stats import StatsReporter
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.output.metric_names import merge_metrics
from agent_r1_async.run.processes.supervisor import failing_actors
from agent_r1_async.wire.messages import ActorStats, decode_data, encode
from tests.fakes.engine import FakeEngine


class FailingStepEnv:
    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        raise ValueError("unit table missing")


class JunkResetEnv:
    async def reset(self, task: Task) -> str:  # wrong return type
        return "hello"

    async def step(self, action: str) -> StepResult:
        raise AssertionError("never reached")


class OkEnv:
    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        return StepResult(Observation([]), 0.0, True, outcome_reward=1.0)


def _no_make() -> OkEnv:
    raise AttributeError("'UnitsEnv' object has no attribute 'make'")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_model_dir())


def _run(rollout: Rollout, env, task_id: str) -> str:
    async def emit(msg) -> None:
        pass

    end = asyncio.run(rollout.run(env, Task(task_id, "q"), EpisodeIds.fresh("g", 1), emit))
    return end.status


def test_each_distinct_env_error_is_logged_once_then_counted(tokenizer, caplog):
    rollout = Rollout(
        engine=FakeEngine.repeating([5]), tokenizer=tokenizer, builder=FullContext(), env_name="units",
        actor_id="a0", max_model_len=512, max_turns=2, step_timeout_s=5.0,
    )
    with caplog.at_level(logging.ERROR, logger="agent_r1_async.envs.errors"):
        statuses = [_run(rollout, FailingStepEnv(), f"t{i}") for i in range(3)]
        statuses.append(_run(rollout, JunkResetEnv(), "t3"))
        statuses.append(_run(rollout, _no_make, "t4"))
    assert statuses == ["env_error"] * 5
    logged = [r.getMessage() for r in caplog.records]
    # Three distinct errors -> three records; the 2nd and 3rd step failures only count.
    assert len(logged) == 3
    step, reset, make = logged
    assert step.startswith("env units: step failed on task t0: ValueError: ")
    assert "unit table missing" in step and "in step" in step  # the traceback's last frame
    assert reset.startswith("env units: reset failed on task t3: TypeError: ")
    assert "env.reset returned 'hello' (str), not Observation" in reset
    assert make.startswith("env units: make failed on task t4: AttributeError: ")
    assert "has no attribute 'make'" in make
    c = rollout.counters
    assert dict(c.env_errors) == {"ValueError": 3, "TypeError": 1, "AttributeError": 1}
    assert c.failed_streak == 5 and "task t4" in c.last_error
    # The counts travel in ActorStats (fields added at the end, defaults for old senders).
    stats = decode_data(encode(StatsReporter("a0", c).report(0)))
    assert isinstance(stats, ActorStats)
    assert stats.env_errors == {"ValueError": 3, "TypeError": 1, "AttributeError": 1}
    assert stats.failed_streak == 5
    # A trainable episode ends the streak.
    assert _run(rollout, OkEnv(), "t5") == "ok" and c.failed_streak == 0


def _actor(streak: int, errors: dict[str, int], last: str) -> dict:
    return {"time": 1.0, "tokens_total": 0, "episodes_done": 0, "episodes_failed": streak,
            "tokens_per_s": 0.0, "episodes_per_s": 0.0, "weight_sync_latency_s": 0.0,
            "policy_version": 0, "episodes_in_flight": 0, "gen_time_s": 0.0, "env_time_s": 0.0,
            "env_errors": errors, "failed_streak": streak, "last_error": last}


def test_failing_actors_needs_every_actor_on_a_streak_of_ceil_n_over_actors():
    # N = 7 over 2 actors: each actor's last ceil(7 / 2) = 4 episodes must have failed.
    a = _actor(4, {"ValueError": 4}, "env_error in env units (task t1): env.step: ValueError: x")
    b = _actor(3, {"ValueError": 3}, "env_error in env units (task t2): env.step: ValueError: x")
    assert failing_actors({"a": a, "b": b}, 7, 2) is None  # b's 4th-last episode succeeded
    b["failed_streak"] = 4
    why = failing_actors({"a": a, "b": b}, 7, 2)
    assert why is not None and why.startswith("the last 8 episodes all failed")
    assert "(task t1): env.step: ValueError: x" in why and "(task t2)" in why
    assert failing_actors({"a": a}, 7, 2) is None  # actor b has not reported yet
    assert failing_actors({"a": a, "b": b}, 0, 2) is None  # 0 disables the check
    # The per-kind counts are summed over actors into env/errors/<kind>.
    record, _ = merge_metrics({"metrics": {"version": 1}}, {"actors": {"a": a, "b": b}})
    assert record["env/errors/ValueError"] == 4 + 3

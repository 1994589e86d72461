"""A long world episode through the actor's rollout (in process, a scripted engine): the
planner's 60+ actions play to success, every context stays within the truncate budget, and
the recorded process rewards sum to 1."""

from __future__ import annotations

import asyncio
import math

from agent_r1_async.actors.context import TruncateContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import StepRecord
from tests.fakes.engine import FakeEngine


def _run(spec, task, actions: list[str], max_turns: int, budget: int):
    tok = load_tokenizer(tiny_model_dir())
    ids = [[*tok.encode(a, add_special_tokens=False), tok.eos_token_id] for a in actions]
    rollout = Rollout(engine=FakeEngine.scripted(ids), tokenizer=tok,
                      builder=TruncateContext(budget), env_name="world", actor_id="a0",
                      max_model_len=1024, max_turns=max_turns, step_timeout_s=30.0)
    steps: list[StepRecord] = []

    async def emit(msg) -> None:
        if isinstance(msg, StepRecord):
            steps.append(msg)

    end = asyncio.run(rollout.run(spec.make, task, EpisodeIds.fresh("g", 1), emit))
    return end, steps


def test_a_long_oracle_episode_plays_to_success_within_the_context_budget():
    spec = get_env_spec(EnvConfig(name="world", max_turns=320, args={
        "horizon": "xlong", "num_train": 1, "num_dev": 1, "num_test": 1,
        "demonstrator": "planner"}))
    task = spec.tasks("dev")[0]
    actions = spec.oracle(task)
    assert len(actions) >= 60
    end, steps = _run(spec, task, actions, max_turns=320, budget=800)
    assert end.status == "ok" and end.outcome_reward == 1.0
    assert end.num_steps == len(actions) == len(steps)
    assert end.metrics["success"] == 1.0 and end.metrics["optimal_len"] == len(actions)
    assert math.isclose(math.fsum(s.process_reward for s in steps), 1.0, abs_tol=1e-12)
    assert max(len(s.context_ids) for s in steps) <= 800
    assert len(steps[-1].context_ids) > 600  # old turns were dropped, not the budget unused


def test_the_turn_limit_ends_a_world_episode_as_truncated_with_its_metrics():
    spec = get_env_spec(EnvConfig(name="world", max_turns=5, args={
        "horizon": "medium", "num_train": 1, "num_dev": 1, "num_test": 1,
        "demonstrator": "planner"}))
    task = spec.tasks("dev")[0]
    actions = spec.oracle(task)
    n = len(actions)
    end, steps = _run(spec, task, actions, max_turns=5, budget=900)
    assert end.status == "truncated" and end.outcome_reward == 0.0 and len(steps) == 5
    assert end.metrics["success"] == 0.0 and end.metrics["steps"] == 5.0
    assert end.metrics["progress"] == 1 - (n - 5) / n
    assert math.isclose(math.fsum(s.process_reward for s in steps), 5 / n, abs_tol=1e-12)

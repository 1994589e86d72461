"""The README's custom-env example works end to end through the registry by import path."""

from __future__ import annotations

import asyncio

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.registry import get_env_spec


def test_example_env_resolves_and_its_oracle_scores_one():
    spec = get_env_spec(EnvConfig(name="examples.capitals_env:CapitalsEnv", args={"repeat": 2}))
    assert len(spec.tasks("train")) == 6 and len(spec.tasks("dev")) == 3
    task = spec.tasks("dev")[0]

    async def play() -> tuple[float, float, str]:
        env = spec.make()
        obs = await env.reset(task)
        first, second = spec.oracle(task)
        r1 = await env.step(first)
        assert not r1.done
        tool_text = r1.observation.messages[0]["content"]
        r2 = await env.step(second)
        assert r2.done
        return r2.outcome_reward, r2.metrics["em"], tool_text + obs.messages[0]["content"]

    outcome, em, text = asyncio.run(play())
    assert outcome == 1.0 and em == 1.0
    assert "Ostrum" in text and "capital_of" in text

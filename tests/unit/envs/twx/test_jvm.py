"""The process's one JVM: small, shared, and relaunched when it dies."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.twx import text
from agent_r1_async.envs.twx.jvm import shared_jvm
from tests.unit.envs.twx.conftest import SMALL_COOKING, make_spec

pytestmark = pytest.mark.usefixtures("twx_ready")


def test_one_small_jvm_holds_every_game_in_play():
    spec = make_spec({**SMALL_COOKING, "num_locations": 7})
    jvm = shared_jvm(256)
    assert jvm.proc.args[3:6] == ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    episodes = [spec.make() for _ in range(64)]

    async def reset_all():
        for env, task in zip(episodes, spec.tasks("train"), strict=False):
            await env.reset(task)

    asyncio.run(reset_all())
    assert spec.definition.pool.leased == 64 and shared_jvm(256) is jvm
    # 148 MB measured here with 64 seven-room games in play; Java's default heap and
    # collector: 447 MB
    assert jvm.rss_mb() < 300


def test_a_dead_jvm_fails_the_episode_in_one_line_and_the_next_reset_relaunches_it():
    spec = make_spec(SMALL_COOKING)
    task = spec.tasks("test")[0]
    env = spec.make()
    asyncio.run(env.reset(task))
    jvm = shared_jvm(256)
    jvm.proc.kill()
    jvm.proc.wait(timeout=10)
    with pytest.raises(EnvError) as err:
        asyncio.run(env.step(text.action_text("look around")))
    assert str(err.value).startswith("textworld_express: stepJSON failed: the JVM exited "
                                     "with code -9")
    assert "\n" not in str(err.value)
    again = spec.make()
    asyncio.run(again.reset(task))
    assert shared_jvm(256).generation == jvm.generation + 1
    for action in spec.oracle(task):
        result = asyncio.run(again.step(action))
    assert result.outcome_reward == 1.0

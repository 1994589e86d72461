"""Blocking code inside `async def` cannot hang an actor.

Episodes run through the real `Rollout` with a scripted engine on one event loop, as in an
actor. Times are scaled down from the realistic case (a 20 s `time.sleep` in a tool with a
10 s tool timeout) to a BLOCK_S = 3 s sleep with a TOOL_TIMEOUT_S = 1 s timeout: the property
is the same (the block outlasts the timeout) and the test stays fast.

A tool run on the actor's own loop would freeze it: `wait_for` could not fire, each call
would take the full 3 s and the four episodes of a group would run one after the other
(>= 12 s) while an unrelated episode on the same loop waited behind them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar

import pytest

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.envs import offload
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.envs.toolenv import Score, ToolEnv
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import EpisodeEnd
from tests.fakes.engine import FakeEngine

BLOCK_S = 3.0
TOOL_TIMEOUT_S = 1.0
STEP_TIMEOUT_S = 1.0
TASK = Task("t-block", "Nap, then answer.", answer="x")
CALL = '<tool_call>{"name": "nap", "arguments": {}}</tool_call>'


class NapTool:
    """A tool written wrong: a synchronous sleep inside `async def`."""

    name = "nap"
    description = "Sleep synchronously."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def call(self) -> str:
        time.sleep(BLOCK_S)
        return "rested"


class NapDomain:
    tools: ClassVar[list[Any]] = [NapTool()]

    def system_prompt(self) -> str:
        return "Use tools."

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(float(answer == task.answer), {"success": float(answer == task.answer)})


class BlockingStepEnv:
    """An env whose `step` blocks synchronously for BLOCK_S."""

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        time.sleep(BLOCK_S)
        return StepResult(Observation([]), 0.0, True, outcome_reward=1.0)


class QuickEnv:
    """Answers at once: must not wait behind a blocked episode."""

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        return StepResult(Observation([]), 0.0, True, outcome_reward=1.0)


def call_then_answer(tokenizer: Any) -> FakeEngine:
    """Turn 0: the nap tool call; afterwards the answer (turn = tool responses in context)."""
    ids = [[*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id]
           for t in (CALL, "<answer>x</answer>")]

    def reply(context_ids: list[int], _n: int) -> list[int]:
        return list(ids[1 if "<tool_response>" in tokenizer.decode(context_ids) else 0])

    return FakeEngine(reply, logprob=-0.1, delay_s=0.01)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_model_dir())


def _rollout(tokenizer: Any) -> Rollout:
    return Rollout(
        engine=call_then_answer(tokenizer), tokenizer=tokenizer, builder=FullContext(),
        env_name="nap", actor_id="a0", max_model_len=512, max_turns=3,
        step_timeout_s=STEP_TIMEOUT_S + TOOL_TIMEOUT_S + 5,
    )


async def _timed(rollout: Rollout, env: Any, t0: float) -> tuple[float, EpisodeEnd]:
    async def emit(msg: Any) -> None:
        pass

    end = await rollout.run(env, TASK, EpisodeIds.fresh("g", 4), emit)
    return time.monotonic() - t0, end


def test_tool_blocking_in_async_def_gives_a_tool_error_on_time_and_others_keep_running(
    tokenizer, caplog
):
    rollout = _rollout(tokenizer)
    offload._warned.discard("tool nap")

    def make() -> ToolEnv:
        return ToolEnv(NapDomain(), max_turns=3, tool_timeout_s=TOOL_TIMEOUT_S)

    async def main() -> list[tuple[float, EpisodeEnd]]:
        t0 = time.monotonic()
        return await asyncio.gather(
            *(_timed(rollout, make(), t0) for _ in range(4)), _timed(rollout, QuickEnv(), t0)
        )

    with caplog.at_level(logging.WARNING, logger="agent_r1_async.envs.offload"):
        results = asyncio.run(main())
    *naps, (quick_s, quick) = results
    # The quick episode (one engine call, one step) is not held up by the blocked tools.
    assert quick.status == "ok" and quick_s < 0.5 * TOOL_TIMEOUT_S
    for elapsed, end in naps:
        # Each nap episode: the call is cut at the 1 s timeout (a tool error the agent sees),
        # then the agent answers: status ok, 2 steps, the tool error counted. All four ran
        # concurrently: ~1 s in total, not 4 x 3 s.
        assert end.status == "ok" and end.num_steps == 2 and end.outcome_reward == 1.0
        assert end.metrics["tool_errors"] == 1.0
        assert TOOL_TIMEOUT_S <= elapsed < TOOL_TIMEOUT_S + 1.0
    warnings = [r.getMessage() for r in caplog.records if "tool nap" in r.getMessage()]
    assert len(warnings) == 1 and "blocked its event loop" in warnings[0]


def test_env_step_blocking_in_async_def_times_out_the_episode_only(tokenizer):
    rollout = _rollout(tokenizer)
    rollout.step_timeout_s = STEP_TIMEOUT_S

    async def main() -> list[tuple[float, EpisodeEnd]]:
        t0 = time.monotonic()
        return await asyncio.gather(
            *(_timed(rollout, BlockingStepEnv(), t0) for _ in range(3)),
            _timed(rollout, QuickEnv(), t0),
        )

    *blocked, (quick_s, quick) = asyncio.run(main())
    assert quick.status == "ok" and quick_s < 0.5 * STEP_TIMEOUT_S
    for elapsed, end in blocked:
        assert end.status == "timeout" and end.num_steps == 0
        assert "BlockingStepEnv" not in end.error  # the reason names the method the user knows
        assert "env.step took longer than env.step_timeout_s=1.0" in end.error
        assert "blocked in a synchronous call" in end.error
        assert STEP_TIMEOUT_S <= elapsed < STEP_TIMEOUT_S + 1.0
    assert rollout.counters.episodes_failed == 3 and rollout.counters.episodes_done == 1

"""Blocking code inside `async def` cannot hang an actor.

Episodes run through the real `Rollout` with a scripted engine on one event loop, as in an
actor. The realistic case (a 20 s `time.sleep` in a tool with a 10 s tool timeout) is played
with a synchronous wait that lasts until the test lets it go (a `threading.Event`, released
once every episode has ended) and 1 s timeouts: the block outlasts the timeout by
construction, so the checks are of order and counts, not of durations.

A tool run on the actor's own loop would freeze it: `wait_for` could not fire and no episode
could end while a call blocks, so the episodes would end only after the release, which comes
after they end: the block's own guard (HANG_GUARD_S) would let them go, and the test fails on
it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
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

HANG_GUARD_S = 60.0
TOOL_TIMEOUT_S = 1.0
STEP_TIMEOUT_S = 1.0
TASK = Task("t-block", "Nap, then answer.", answer="x")
CALL = '<tool_call>{"name": "nap", "arguments": {}}</tool_call>'


class Block:
    """A synchronous block that lasts until `release()`; `log` is the order of events."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.log: list[str] = []
        self.let_go: list[bool] = []  # per block: True when released, False on the guard

    def wait(self) -> None:
        self.log.append("block")
        let_go = self.released.wait(HANG_GUARD_S)  # time.sleep's twin: it blocks its thread
        if not let_go:
            self.log.append("block gave up")  # the loop was blocked: nothing could release it
        self.let_go.append(let_go)

    def release(self) -> None:
        self.log.append("released")
        self.released.set()

    def before_release(self) -> list[str]:
        return self.log[:self.log.index("released")]


class NapTool:
    """A tool written wrong: a synchronous wait inside `async def`."""

    name = "nap"
    description = "Wait synchronously."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, block: Block) -> None:
        self.block = block

    async def call(self) -> str:
        self.block.wait()
        return "rested"


class NapDomain:
    def __init__(self, block: Block) -> None:
        self.tools = [NapTool(block)]

    def system_prompt(self) -> str:
        return "Use tools."

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(float(answer == task.answer), {"success": float(answer == task.answer)})


class BlockingStepEnv:
    """An env whose `step` blocks synchronously until the block is released."""

    def __init__(self, block: Block) -> None:
        self.block = block

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        self.block.wait()
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


async def _ended(rollout: Rollout, env: Any, name: str, block: Block) -> EpisodeEnd:
    async def emit(msg: Any) -> None:
        pass

    end = await rollout.run(env, TASK, EpisodeIds.fresh("g", 4), emit)
    block.log.append(f"{name} ended")
    return end


def _play(rollout: Rollout, block: Block, blocked: list[Any]) -> list[EpisodeEnd]:
    """The `blocked` envs' episodes and a quick one, all at once on one loop; the block is
    released once they have all ended (or on the way out of a failure)."""

    async def main() -> list[EpisodeEnd]:
        return await asyncio.gather(*(_ended(rollout, env, "episode", block) for env in blocked),
                                    _ended(rollout, QuickEnv(), "quick episode", block))

    try:
        return asyncio.run(main())
    finally:
        block.release()


def test_tool_blocking_in_async_def_gives_a_tool_error_on_time_and_others_keep_running(
    tokenizer, caplog
):
    rollout = _rollout(tokenizer)
    offload._warned.discard("tool nap")
    block = Block()

    def make() -> ToolEnv:
        return ToolEnv(NapDomain(block), max_turns=3, tool_timeout_s=TOOL_TIMEOUT_S)

    with caplog.at_level(logging.WARNING, logger="agent_r1_async.envs.offload"):
        *naps, quick = _play(rollout, block, [make() for _ in range(4)])
    # Every episode ended while all four tools were still blocked (none returns before the
    # release): the four calls were in flight at once, each was cut at its timeout, and the
    # quick episode was not held up behind them.
    assert sorted(block.before_release()) == (
        ["block"] * 4 + ["episode ended"] * 4 + ["quick episode ended"])
    assert quick.status == "ok"
    for end in naps:
        # Each nap episode: the call is cut at the timeout (a tool error the agent sees), then
        # the agent answers: status ok, 2 steps, the tool error counted.
        assert end.status == "ok" and end.num_steps == 2 and end.outcome_reward == 1.0
        assert end.metrics["tool_errors"] == 1.0
    warnings = [r.getMessage() for r in caplog.records if "tool nap" in r.getMessage()]
    assert len(warnings) == 1 and "blocked its event loop" in warnings[0]
    _released(block, 4)


def test_env_step_blocking_in_async_def_times_out_the_episode_only(tokenizer):
    rollout = _rollout(tokenizer)
    rollout.step_timeout_s = STEP_TIMEOUT_S
    block = Block()

    *blocked, quick = _play(rollout, block, [BlockingStepEnv(block) for _ in range(3)])
    assert sorted(block.before_release()) == (
        ["block"] * 3 + ["episode ended"] * 3 + ["quick episode ended"])
    assert quick.status == "ok"
    for end in blocked:
        assert end.status == "timeout" and end.num_steps == 0
        assert "BlockingStepEnv" not in end.error  # the reason names the method the user knows
        assert "env.step took longer than env.step_timeout_s=1.0" in end.error
        assert "blocked in a synchronous call" in end.error
    assert rollout.counters.episodes_failed == 3 and rollout.counters.episodes_done == 1
    _released(block, 3)


def _released(block: Block, n: int) -> None:
    """The `n` abandoned blocks end once released (by the test, not by their guard)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while len(block.let_go) < n:
        assert time.monotonic() < deadline, "a released block did not end"
        time.sleep(0.01)
    assert block.let_go == [True] * n

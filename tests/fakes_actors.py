"""Fakes for actor-side unit tests: a scripted engine and a scripted env."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agent_r1_async.actors.engine import EngineError, GenResult
from agent_r1_async.envs.base import Observation, StepResult, Task


class FakeEngine:
    """Answers every request with `action_ids` (log-prob -0.5 each) at `self.version`.

    `fail_on_call` makes the n-th call (0-based) raise `EngineError`; `delay_s` sleeps first.
    """

    def __init__(
        self, action_ids: list[int], fail_on_call: int | None = None, delay_s: float = 0.0
    ) -> None:
        self.action_ids = action_ids
        self.fail_on_call = fail_on_call
        self.delay_s = delay_s
        self.version = 0
        self.calls: list[tuple[list[int], int | None]] = []
        self.loaded: list[int] = []

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        n = len(self.calls)
        self.calls.append((list(context_ids), max_new_tokens))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if n == self.fail_on_call:
            raise EngineError("scripted engine failure")
        ids = self.action_ids[: max_new_tokens or len(self.action_ids)]
        return GenResult(ids, [-0.5] * len(ids), "stop", self.version)

    async def load_weights(self, version: int, state_dict: dict) -> None:
        self.version = version
        self.loaded.append(version)

    async def close(self) -> None:
        pass


@dataclass
class ScriptedEnv:
    """Ends after `turns` steps with outcome 1.0; `raise_on` / `hang_on` step index misbehaves.

    Step index -1 means reset. Records the action texts it saw.
    """

    turns: int = 2
    raise_on: int | None = None
    hang_on: int | None = None
    never_done: bool = False
    actions: list[str] = field(default_factory=list)

    async def _misbehave(self, index: int) -> None:
        if index == self.raise_on:
            raise RuntimeError(f"scripted env failure at {index}")
        if index == self.hang_on:
            await asyncio.sleep(3600)

    async def reset(self, task: Task) -> Observation:
        await self._misbehave(-1)
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        index = len(self.actions)
        self.actions.append(action)
        await self._misbehave(index)
        done = not self.never_done and index + 1 >= self.turns
        return StepResult(
            observation=Observation([] if done else [{"role": "tool", "content": f"obs {index}"}]),
            reward=0.1 * (index + 1),
            done=done,
            outcome_reward=1.0 if done else 0.0,
            num_tool_calls=1,
            metrics={"em": 1.0} if done else {},
        )

"""Scripted envs, tools and env definitions for tests; most misbehave on purpose.

- `ScriptedEnv`: ends after `turns` steps with outcome 1.0; raises or hangs at a chosen step.
- Tools (`EchoTool`, `SleepTool`, `BoomTool`, `JunkTool`) and `FakeDomain` for ToolEnv tests.
- `HangingEnvDef` (env name "tests.fakes.envs:HangingEnvDef"): a ToolEnv whose step hangs for
  task HANG_STEP and whose tool hangs for task HANG_TOOL.
- `SlowStepsEnvDef` ("tests.fakes.envs:SlowStepsEnvDef"): every episode takes exactly
  `max_turns` steps of 0.2 s whatever the policy says (so there is a "mid-episode" to kill).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.envs.toolenv import CallOutcome, EpisodeState, Score, ToolEnv

# --------------------------------------------------------------------------------------
# A scripted env
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Tools and a domain for ToolEnv
# --------------------------------------------------------------------------------------


class EchoTool:
    name = "echo"
    description = "Echo the text back."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
        "additionalProperties": False,
    }

    async def call(self, text: str, times: int = 1) -> str:
        return text * times


class SleepTool:
    """Sleeps `seconds` (cut by the ToolEnv timeout when too long)."""

    name = "sleep"
    description = "Sleep, then say done."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"seconds": {"type": "number"}},
        "required": ["seconds"],
    }

    def __init__(self) -> None:
        self.cancelled = 0

    async def call(self, seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return f"slept {seconds}"


class BoomTool:
    name = "boom"
    description = "Always raises."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def call(self) -> str:
        raise RuntimeError("kaboom")


class JunkTool:
    name = "junk"
    description = "Returns an object that is not JSON-like."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def call(self) -> Any:
        return object()


class FakeDomain:
    """Answer must equal task.answer; +0.5 process reward each time echo returns "gold"."""

    def __init__(self, tools: list[Any] | None = None, *, fail_score: bool = False) -> None:
        self.tools = (
            tools if tools is not None else [EchoTool(), SleepTool(), BoomTool(), JunkTool()]
        )
        self.fail_score = fail_score

    def system_prompt(self) -> str:
        return "Use tools."

    def score(self, task: Task, answer: str | None) -> Score:
        if self.fail_score:
            raise ZeroDivisionError("scorer bug")
        ok = float(answer == task.answer)
        return Score(ok, {"success": ok})

    def process_reward(self, state: EpisodeState, outcome: CallOutcome) -> float:
        return 0.5 if outcome.result == "gold" else 0.0


TASK = Task("t0", "Say the word.", "gold")


# --------------------------------------------------------------------------------------
# Env definitions (registry protocol) that hang or take many slow steps
# --------------------------------------------------------------------------------------

HANG_STEP = "hang-step"
"""Task whose env.step never returns: the episode must end with status "timeout"."""
HANG_TOOL = "hang-tool"
"""Task whose tool never returns: that call fails with a timeout, the episode goes on."""

TOOL_CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
ANSWER = "<answer>42</answer>"


class LookupTool:
    name = "lookup"
    description = "Look something up."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self, domain: HangingDomain) -> None:
        self.domain = domain

    async def call(self, **arguments: Any) -> str:
        if self.domain.task_id == HANG_TOOL:
            await asyncio.sleep(3600)
        return "found 42"


class HangingDomain:
    def __init__(self) -> None:
        self.task_id = ""
        self.tools = [LookupTool(self)]

    def system_prompt(self) -> str:
        return "Use the lookup tool, then answer in <answer></answer>."

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(1.0 if answer == "42" else 0.0, {"em": float(answer == "42")})


class HangingEnv:
    """A ToolEnv whose step hangs for task HANG_STEP and whose tool hangs for HANG_TOOL."""

    def __init__(self, tool_timeout_s: float, max_turns: int) -> None:
        self.domain = HangingDomain()
        self.inner = ToolEnv(self.domain, max_turns=max_turns, tool_timeout_s=tool_timeout_s)

    async def reset(self, task: Task) -> Observation:
        self.domain.task_id = task.task_id
        return await self.inner.reset(task)

    async def step(self, action: str) -> StepResult:
        if self.domain.task_id == HANG_STEP:
            await asyncio.sleep(3600)
        return await self.inner.step(action)


class HangingEnvDef:
    """Env definition (registry protocol): tasks hang-step, hang-tool and ok-0..ok-3."""

    def __init__(self, args: Any, env_cfg: Any) -> None:
        self.env_cfg = env_cfg

    def make(self) -> HangingEnv:
        return HangingEnv(self.env_cfg.tool_timeout_s, self.env_cfg.max_turns)

    def tasks(self, split: str) -> list[Task]:
        names = [HANG_STEP, HANG_TOOL, "ok-0", "ok-1", "ok-2", "ok-3"]
        return [Task(n, f"Task {n}: look it up.") for n in names]


class SlowStepsEnv:
    """Every episode takes exactly `turns` steps whatever the agent says, each step 0.2 s."""

    def __init__(self, turns: int) -> None:
        self.turns, self.steps = turns, 0

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        await asyncio.sleep(0.2)  # a slow tool: episodes spend most of their time mid-way
        self.steps += 1
        done = self.steps >= self.turns
        more = [] if done else [{"role": "user", "content": f"Step {self.steps} done. Go on."}]
        return StepResult(Observation(more), 0.0, done, outcome_reward=float(len(action) % 2))


class SlowStepsEnvDef:
    """Env definition: multi-step episodes regardless of the policy (a random model never
    calls a tool, so real envs end its episodes after one step: nothing to kill mid-way)."""

    def __init__(self, args: Any, env_cfg: Any) -> None:
        self.turns = env_cfg.max_turns

    def make(self) -> SlowStepsEnv:
        return SlowStepsEnv(self.turns)

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"count-{i}", f"Count to {i}, one number per turn.") for i in range(8)]

"""Fakes for env tests: tools that echo, sleep, raise or return junk; a tiny ToolDomain."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from agent_r1_async.envs.base import Task
from agent_r1_async.envs.toolenv import CallOutcome, EpisodeState, Score


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

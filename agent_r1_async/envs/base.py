"""Core agent-side interfaces (Agent-R1's MDP): Task, Observation, StepResult, Env, Tool.

- An `Env` is one episode's environment: `reset(task)` gives the opening messages, then
  `step(action_text)` interprets each action and answers. Envs are stateful and cheap; the
  actor makes one per episode through the env's `EnvSpec`.
- A `Tool` *executes* and reports what happened (the raw result). A `ToolEnv` (toolenv.py)
  *interprets*: parses tool calls out of the action, validates arguments, runs tools with a
  timeout, formats responses as chat messages, assigns process rewards and decides `done`.
- Observations are chat messages; the actor's context builder turns the history into token
  ids with the model's chat template, keeping every action as the exact token ids sampled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

Message = dict[str, str]
"""A chat message: {"role": "system" | "user" | "assistant" | "tool", "content": "..."}."""


@dataclass(frozen=True)
class Task:
    """One task of a dataset split: what the agent is asked and what counts as success."""

    task_id: str
    prompt: str
    """The instruction (becomes the user message)."""
    answer: Any = None
    """Gold answer(s) for the env's outcome reward; never shown to the agent."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Env-specific extras (supporting facts, difficulty, ...)."""


@dataclass
class Observation:
    """New messages to append to the interaction history (reset: system + user)."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    """At reset: the tools' JSON schemas in the OpenAI function format
    (`{"type": "function", "function": {"name", "description", "parameters"}}`); the actor
    renders them with the chat template's own tool support (`tools=`), or as a text block in
    the system message when the template has none. Ignored after reset."""


@dataclass
class StepResult:
    """What the env says about one action."""

    observation: Observation
    """Messages answering the action (tool responses); empty when done."""
    reward: float
    """Process reward of THIS step (well-formed call, useful retrieval, ...), credited to this
    step's action; paid on every step, the last one included."""
    done: bool
    outcome_reward: float = 0.0
    """The episode's final outcome reward (EM, F1, success), read only when `done`; the
    learner adds it to the episode's return (GRPO groups compare it across the group)."""
    truncated: bool = False
    """True when the episode ended because it ran out of turns, not by answering."""
    num_tool_calls: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    """Named episode metrics (em, f1, success, format_ok, ...): those of every step are merged
    into the episode's (a later step's value for the same name wins), logged as `env/<name>`
    and shown in evaluation tables."""


@runtime_checkable
class Env(Protocol):
    """One episode's environment."""

    async def reset(self, task: Task) -> Observation: ...

    async def step(self, action: str) -> StepResult: ...


@runtime_checkable
class Tool(Protocol):
    """Executes one kind of call and reports the raw result."""

    name: ClassVar[str] | str
    description: ClassVar[str] | str
    parameters: ClassVar[dict[str, Any]] | dict[str, Any]
    """JSON schema of the arguments object."""

    async def call(self, **arguments: Any) -> Any: ...


class EnvError(RuntimeError):
    """An env failed (its episode ends with status "env_error"; the actor goes on)."""


class Untrained(str):
    """An oracle action that a demonstration plays and shows but does not train on: a
    deliberate mistake (one the env refuses) that the demonstration's next action recovers
    from, so the warm start sees recoveries without learning the mistakes (sft/demos.py)."""

    __slots__ = ()


def demo_tasks(tasks: Sequence[Any], seed: int, offset: int) -> list[Any]:
    """The train tasks in the order a warm start draws its demonstrations (`sft.demo_seed`;
    -1: as given), the first `offset` of them skipped (`sft.demo_offset`). Here, below `sft`,
    so that an env's own demonstration writer (multi-hop's Naive RAG reader) draws the same."""
    order = list(tasks)
    if seed >= 0:
        random.Random(seed).shuffle(order)
    return order[offset:]

"""A complete custom environment in ~50 lines: look up a country's capital with a tool.

Use it without installing anything:

    agent-r1-async launch --set env.name=examples.capitals_env:CapitalsEnv

or give it a name: `@register_env("capitals")` on the class and
`--set env.import=[examples.capitals_env] --set env.name=capitals`, or an entry point in your
pyproject (`[project.entry-points."agent_r1_async.envs"]
capitals = "my_pkg.capitals_env:CapitalsEnv"`). Check it first:
`agent-r1-async envs check examples.capitals_env:CapitalsEnv`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.rewards import exact_match
from agent_r1_async.envs.toolenv import Score, ToolCall, ToolEnv, tool_call_text

CAPITALS = {"Veltrania": "Ostrum", "Corvassa": "Lin Dara", "Pellmark": "Saint Aube"}


class CapitalLookup:
    """The Tool: executes and reports the raw result."""

    name = "capital_of"
    description = "Return the capital city of a country."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"country": {"type": "string"}},
        "required": ["country"],
    }

    async def call(self, country: str) -> str:
        return CAPITALS.get(country, f"no record for {country!r}")


class CapitalsDomain:
    """What the tool's results mean: the prompt and the outcome score."""

    def __init__(self) -> None:
        self.tools = [CapitalLookup()]

    def system_prompt(self) -> str:
        return ('Call tools like <tool_call>{"name": "capital_of", "arguments": '
                '{"country": "X"}}</tool_call>, then answer like <answer>CITY</answer>.')

    def score(self, task: Task, answer: str | None) -> Score:
        em = exact_match(answer or "", task.answer)
        return Score(em, {"em": em})


class CapitalsArgs(msgspec.Struct, forbid_unknown_fields=True):
    repeat: int = 10
    """Copies of each country in the train split."""


class CapitalsEnv:
    """Capitals of fictional countries, looked up with a tool."""

    Args = CapitalsArgs

    def __init__(self, args: CapitalsArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg, self.domain = args, env_cfg, CapitalsDomain()

    def make(self) -> ToolEnv:
        return ToolEnv(self.domain, max_turns=self.env_cfg.max_turns,
                       tool_timeout_s=self.env_cfg.tool_timeout_s)

    def tasks(self, split: str) -> list[Task]:
        n = self.args.repeat if split == "train" else 1
        return [Task(f"{split}-{c}-{i}", f"What is the capital of {c}?", city)
                for i in range(n) for c, city in CAPITALS.items()]

    def oracle(self, task: Task) -> list[str]:
        country = task.prompt.removeprefix("What is the capital of ").rstrip("?")
        return [tool_call_text(ToolCall("capital_of", {"country": country})),
                f"<answer>{task.answer}</answer>"]

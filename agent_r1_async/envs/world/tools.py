"""The world's tools: their schemas, the system prompt that shows one call, and `WorldTool`,
which hands a call to the episode's world as an action."""

from __future__ import annotations

from typing import Any, Protocol

from agent_r1_async.envs.toolenv import ToolCall
from agent_r1_async.envs.world.layout import DIRECTIONS
from agent_r1_async.envs.world.state import Action


class Actor(Protocol):
    """What a tool acts on: one episode's world."""

    def act(self, action: Action) -> str: ...


SYSTEM_PROMPT = (
    "You are in a house of rooms. Act with one tool call per turn, like this:\n"
    '<tool_call>{"name": "go", "arguments": {"direction": "north"}}</tool_call>\n'
    "A locked door opens with the key of its color: stand next to it and unlock it. "
    "The task ends when every object it names lies in the room it names."
)

# Schemas kept short: their text is part of every prompt (~300 tokens for the six).
_DIRECTION = {"type": "string", "enum": list(DIRECTIONS)}
_ITEM = {"type": "string"}
_NONE: dict[str, Any] = {"type": "object", "properties": {}}


def _one(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {name: schema}, "required": [name]}


TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "go": ("Walk through an exit.", _one("direction", _DIRECTION)),
    "take": ("Pick up an item in this room (a cup, a red key).", _one("item", _ITEM)),
    "drop": ("Put down an item you carry.", _one("item", _ITEM)),
    "unlock": ("Unlock the door in a direction with its key.", _one("direction", _DIRECTION)),
    "look": ("Describe this room.", _NONE),
    "inventory": ("List what you carry.", _NONE),
}
_ARGUMENT = {"go": "direction", "take": "item", "drop": "item", "unlock": "direction"}


def action_call(action: Action) -> ToolCall:
    """The tool call of a world action."""
    tool, arg = action
    return ToolCall(tool, {_ARGUMENT[tool]: arg} if tool in _ARGUMENT else {})


class WorldTool:
    """One of the world's actions as a tool; `world` is the episode's (env.py's `WorldDomain`)."""

    def __init__(self, name: str, world: Actor) -> None:
        self.name = name
        self.description, self.parameters = TOOLS[name]
        self.world = world

    async def call(self, **arguments: Any) -> str:
        arg = arguments.get(_ARGUMENT.get(self.name, ""), "")
        return self.world.act((self.name, str(arg)))

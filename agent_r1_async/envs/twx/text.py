"""What the agent reads and writes: the system prompt, the `act` tool, observations, and the
reading of one command out of an action."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent_r1_async.envs.toolenv import ToolCall, parse_tool_calls, schema_errors, tool_call_text
from agent_r1_async.envs.twx.games import Game

TOOL = "act"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "string", "description": "e.g. move north"}},
    "required": ["command"],
    "additionalProperties": False,
}
TOOL_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL, "description": "Send one command to the text game.", "parameters": PARAMETERS}}
MAX_COMMAND_CHARS = 200


def system_prompt(game: Game) -> str:
    example = tool_call_text(ToolCall(TOOL, {"command": "look around"}))
    return ("You play a text game. Each turn, send exactly one command with the act tool, "
            f"like this:\n{example}\nCommands: {game.commands}.")


def action_text(command: str) -> str:
    """The action that sends `command` (oracle demonstrations)."""
    return tool_call_text(ToolCall(TOOL, {"command": command}))


def observation(text: str, valid_actions: Sequence[str] | None = None) -> str:
    """A game observation, with the valid commands appended when given."""
    if valid_actions is None:
        return text
    return f"{text}\n\nValid commands: {', '.join(valid_actions)}"


@dataclass(frozen=True)
class Command:
    """The command an action sends (None: none), and what was wrong with the action."""

    command: str | None
    error: str = ""
    calls: int = 0


def read_command(action: str) -> Command:
    """The first call of the action must be a well-formed `act` call; its command is sent
    stripped (the game matches commands exactly: "take dirty green T-shirt"). Later calls
    are not run: an error, while the first one still runs."""
    parsed = parse_tool_calls(action)
    if not parsed:
        return Command(None, "Error: no command. Send one like "
                             f"{action_text('look around')}")
    first = parsed[0]
    if not isinstance(first, ToolCall):
        return Command(None, f"Error: {first.message}.", len(parsed))
    if first.name != TOOL:
        return Command(None, f"Error: unknown tool {first.name!r}; the only tool is {TOOL}.",
                       len(parsed))
    errors = schema_errors(PARAMETERS, first.arguments)
    if errors:
        return Command(None, f"Error: invalid arguments for {TOOL}: {'; '.join(errors)}.",
                       len(parsed))
    command = str(first.arguments["command"]).strip()
    if not command or len(command) > MAX_COMMAND_CHARS:
        return Command(None, f"Error: a command is 1 to {MAX_COMMAND_CHARS} characters.",
                       len(parsed))
    extra = len(parsed) - 1
    error = f"Error: one command per turn; the {extra} after the first did not run." if extra else ""
    return Command(command, error, len(parsed))

"""Tool calls in an action's text, as OpenAI `tool_calls` (the Hermes format).

Qwen2.5/3, Hermes and our own `ToolEnv` have the model write each call as
`<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`. When a chat request offers
`tools`, the text of each such block that parses (a JSON object with a string `name` and an
object `arguments`) becomes one `tool_calls` entry and leaves the message's `content`; a
block that does not parse stays in `content` as text, untouched. Nothing here touches the
action's token ids: the session keeps those exactly as sampled.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]


def _parse_block(text: str) -> ParsedCall | None:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return ParsedCall(obj["name"], args) if isinstance(args, dict) else None


def split_tool_calls(text: str) -> tuple[str, list[ParsedCall]]:
    """(the text without its parsed tool-call blocks, stripped; the calls in order)."""
    calls: list[ParsedCall] = []
    kept: list[str] = []
    last = 0
    for match in _BLOCK.finditer(text):
        call = _parse_block(match.group(1))
        if call is None:
            continue
        kept.append(text[last:match.start()])
        last = match.end()
        calls.append(call)
    kept.append(text[last:])
    return "".join(kept).strip() if calls else text, calls


def openai_tool_calls(calls: list[ParsedCall]) -> list[dict[str, Any]]:
    """The calls as an OpenAI assistant message's `tool_calls` (arguments as a JSON string)."""
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments,
                                                                   ensure_ascii=False)}}
            for c in calls]

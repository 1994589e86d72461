"""An MCP `CallToolResult` as the text the agent reads: content blocks joined, capped in size."""

from __future__ import annotations

import json
from typing import Any


class McpToolError(RuntimeError):
    """The server answered the call with `isError` (the agent sees the server's message)."""


def result_text(result: Any) -> str:
    """The text of a CallToolResult's content blocks, one per line (non-text blocks named)."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            mime = getattr(block, "mime_type", "") or getattr(block, "uri", "")
            parts.append(f"[{kind or type(block).__name__} content{' ' + str(mime) if mime else ''}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def truncate(text: str, cap: int, server: str) -> str:
    """`text` cut to `cap` characters, with a marker saying how much was cut, when longer."""
    if len(text) <= cap:
        return text
    return (f"{text[:cap]}\n[truncated by the MCP client: {len(text) - cap} of {len(text)} "
            f"characters cut (server {server!r}, max_result_chars={cap})]")


def tool_output(result: Any, cap: int, server: str) -> str:
    """What a call returns to the ToolEnv; an `isError` result raises McpToolError."""
    text = truncate(result_text(result), cap, server)
    if result.is_error:
        raise McpToolError(text)
    return text

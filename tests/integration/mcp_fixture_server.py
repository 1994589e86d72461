"""A real MCP server for the MCP tests (stdio, or streamable HTTP with `--http PORT`).

Tools: echo, count (a counter per MCP session), pid, sleep (a hung call), big (a large
result), auth (the Authorization header the server received), meet (how many calls were in
flight at once). `tasks(split)`: two tasks.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

TASKS = [{"id": "echo-0", "prompt": "Echo 'hi' then answer 7.", "answer": 7,
          "oracle": [{"name": "echo", "arguments": {"text": "hi"}}]},
         {"id": "echo-1", "prompt": "Echo 'yo' then answer 9.", "answer": 9,
          "oracle": [{"name": "echo", "arguments": {"text": "yo"}}]}]


def tasks(split: str) -> list[dict[str, Any]]:
    return [dict(t, id=f"{split}-{t['id']}") for t in TASKS]


def build() -> MCPServer:
    server = MCPServer("fixture", log_level="WARNING")
    counts: dict[str, int] = {}

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def count(ctx: Context) -> int:
        """How many times this session has called count."""
        key = (ctx.headers or {}).get("mcp-session-id", "stdio")  # stdio: one per process
        counts[key] = counts.get(key, 0) + 1
        return counts[key]

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return "awake"

    @server.tool()
    def big(n: int) -> str:
        """n characters: 'a' * (n - 1) + 'Z'."""
        return "a" * (n - 1) + "Z"

    @server.tool()
    def auth(ctx: Context) -> str:
        """The Authorization header of this request."""
        return (ctx.headers or {}).get("authorization", "(none)")

    in_flight = {"now": 0, "peak": 0}

    @server.tool()
    async def meet(n: int, within_s: float) -> str:
        """Wait until n meet calls have been in flight at once (at most within_s), then answer
        the most that ever were (this server process)."""
        in_flight["now"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        try:
            with anyio.move_on_after(within_s):
                while in_flight["peak"] < n:
                    await anyio.sleep(0.01)
            return f"peak {in_flight['peak']}"
        finally:
            in_flight["now"] -= 1

    return server


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        build().run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        if "--junk" in sys.argv:  # a line that is JSON but not JSON-RPC, before serving
            sys.stdout.write('{"jsonrpc": "2.0", "nonsense": true}\n')
            sys.stdout.flush()
        build().run("stdio")

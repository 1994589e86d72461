"""One configured MCP server in this process: its sessions and its limits.

- at most `max_concurrency` calls in flight (a semaphore on the host loop);
- each call cut at `timeout_s` (`McpTimeout`: that call fails, the episode goes on);
- a session that drops (server died, socket closed) is reopened and the call retried, up to
  `retries` times. A per-episode session that already answered a call is not replayed onto
  a fresh one, whose state would be missing: the episode fails (`McpSessionLost`);
- results longer than `max_result_chars` are cut and marked (results.py).

Sessions: a `shared` server has one session per process, opened on first use; otherwise
each episode holds its own `Lease` (stdio: its own server process) until it ends.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agent_r1_async.envs import host_loop
from agent_r1_async.envs.mcp.args import McpServerArgs
from agent_r1_async.envs.mcp.connection import Connection, McpConnectError, describe
from agent_r1_async.envs.mcp.results import McpToolError, tool_output


class McpTimeout(RuntimeError):
    """A call took longer than the server's `timeout_s` (it is cancelled)."""


class McpSessionLost(RuntimeError):
    """The server is gone for this episode: its session dropped and could not be reopened
    (or held episode state). The episode fails; the next one connects afresh."""


@dataclass
class Lease:
    """One episode's use of one server."""

    conn: Connection | None = None
    answered: bool = False
    """A call on `conn` completed: the session may hold this episode's state."""
    failure: str = ""
    """Why the server is lost for this episode ("" while it is not)."""


@dataclass
class McpServer:
    """A server's sessions and limits; its coroutines run on the host loop."""

    args: McpServerArgs
    _sem: asyncio.Semaphore | None = None
    _shared: Connection | None = None
    _shared_lock: asyncio.Lock | None = None
    _open: set[Connection] = field(default_factory=set)

    def __post_init__(self) -> None:
        host_loop.at_exit(self.close_all)

    @property
    def label(self) -> str:
        return f"MCP server {self.args.name!r} ({self.args.where})"

    async def list_tools(self) -> list[Any]:
        """The server's tools (every page), from a session opened and closed for it."""
        from mcp.types import PaginatedRequestParams

        conn = await Connection(self.args).open()
        try:
            tools: list[Any] = []
            cursor: str | None = None
            while True:
                params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
                page = await asyncio.wait_for(conn.session.list_tools(params=params),
                                              self.args.connect_timeout_s)
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    break
            if conn.protocol_errors:
                raise McpConnectError(
                    f"{self.label} wrote {conn.protocol_errors} message(s) that are not "
                    f"JSON-RPC while listing its tools (first: {conn.first_protocol_error})")
            return tools
        finally:
            await conn.close()

    async def call(self, lease: Lease, name: str, arguments: dict[str, Any]) -> str:
        """Call tool `name`; the text the agent reads. Raises McpToolError (the server says
        the call failed), McpTimeout, or McpSessionLost (also recorded in `lease.failure`)."""
        if lease.failure:
            raise McpSessionLost(lease.failure)
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.args.max_concurrency)
        async with self._sem:
            tries = 0
            while True:
                conn = await self._connection(lease)
                try:
                    result = await asyncio.wait_for(conn.session.call_tool(name, arguments),
                                                    self.args.timeout_s)
                except TimeoutError:
                    raise McpTimeout(f"{self.label} did not answer {name} within "
                                     f"timeout_s={self.args.timeout_s:g}") from None
                except Exception as e:
                    if not _dropped(e, conn):  # e.g. a JSON-RPC error answer: the call failed
                        raise McpToolError(describe(e)) from None
                    why = describe(conn.error or e)
                else:
                    if not self.args.shared:
                        lease.answered = True
                    return tool_output(result, self.args.max_result_chars, self.args.name)
                await self._drop(conn)
                tries += 1
                if lease.answered or tries > self.args.retries:
                    raise self._lost(lease, f"its session dropped during {name}: {why}")

    async def _connection(self, lease: Lease) -> Connection:
        """The live connection the lease calls through, opened (again) when needed."""
        if self.args.shared:
            if self._shared_lock is None:
                self._shared_lock = asyncio.Lock()
            async with self._shared_lock:
                if self._shared is None or not self._shared.alive:
                    if self._shared is not None:
                        await self._drop(self._shared)
                    self._shared = await self._open_for(lease)
                return self._shared
        if lease.conn is not None and lease.conn.alive:
            return lease.conn
        if lease.conn is not None:
            dead, lease.conn = lease.conn, None
            await self._drop(dead)
            if lease.answered:
                raise self._lost(lease, f"its session ended: {describe_conn(dead)}")
        lease.conn = await self._open_for(lease)
        return lease.conn

    async def _open_for(self, lease: Lease) -> Connection:
        conn = Connection(self.args)
        self._open.add(conn)
        try:
            return await conn.open()
        except McpConnectError as e:
            self._open.discard(conn)
            raise self._lost(lease, str(e).removeprefix(f"{self.label} ")) from None

    def _lost(self, lease: Lease, why: str) -> McpSessionLost:
        lease.failure = f"{self.label} is gone for this episode: {why}"
        return McpSessionLost(lease.failure)

    async def _drop(self, conn: Connection) -> None:
        self._open.discard(conn)
        if self._shared is conn:
            self._shared = None
        await conn.close()

    async def release(self, lease: Lease) -> None:
        """The episode ended: close its own session (a shared one stays)."""
        conn, lease.conn = lease.conn, None
        if conn is not None:
            await self._drop(conn)

    async def close_all(self) -> None:
        await asyncio.gather(*(c.close() for c in list(self._open)), return_exceptions=True)
        self._open.clear()
        self._shared = None


def _dropped(e: Exception, conn: Connection) -> bool:
    """Whether a call failed because its session is gone (not because the server said no)."""
    import anyio
    import httpx2
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(e, MCPError):
        return e.code == CONNECTION_CLOSED or not conn.alive
    gone = (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
            httpx2.TransportError)
    return isinstance(e, gone) or not conn.alive


def describe_conn(conn: Connection) -> str:
    return describe(conn.error) if conn.error is not None else "closed"

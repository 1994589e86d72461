"""One MCP session to one server: a stdio server process, or a session of an HTTP server.

The SDK's transports are anyio context managers that must be entered and left by the same
task, so each `Connection` runs one task on the host loop (host.py) that opens the
transport and the `ClientSession`, holds them until `close()`, then leaves them (a stdio
server is stopped there; an HTTP session is ended with DELETE). Calls come from other
tasks of the same loop. When the transport ends (the server died, the socket closed) the
task ends and `alive` turns False.

A line from the server that is not JSON-RPC (the SDK skips it and logs its traceback) is kept
as `protocol_errors` and the first one's one-line description, and the SDK's traceback is kept
off the console (`_quiet_sdk`): listing tools fails on it in one line (server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from typing import IO, Any

from agent_r1_async.envs.mcp.args import McpServerArgs

log = logging.getLogger(__name__)
_SDK_PARSE_FAILURE = "Failed to parse JSONRPC message from server"


class _DropParseFailures(logging.Filter):
    """The SDK logs each unparsable line with a traceback; the connection reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _SDK_PARSE_FAILURE


def _quiet_sdk() -> None:
    sdk = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(f, _DropParseFailures) for f in sdk.filters):
        sdk.addFilter(_DropParseFailures())


class McpConnectError(RuntimeError):
    """The server did not start, or its session could not be opened."""


class Connection:
    """One open MCP session (use on the host loop only)."""

    def __init__(self, server: McpServerArgs) -> None:
        self.server = server
        self.session: Any = None
        self.error: BaseException | None = None
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._errlog: IO[str] | None = None
        """A stdio server's stderr (its last line goes into failure messages)."""
        self._stderr_last = ""
        self.protocol_errors = 0
        """Messages from the server that were not JSON-RPC (module docstring)."""
        self.first_protocol_error = ""

    @property
    def alive(self) -> bool:
        return self.session is not None and self._task is not None and not self._task.done()

    async def open(self) -> Connection:
        s = self.server
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{s.name}")
        ready = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait([ready, self._task], timeout=s.connect_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self.session is None:
            await self.close()
            why = (describe(self.error) if self.error is not None
                   else f"no session within connect_timeout_s={s.connect_timeout_s:g}")
            verb = "could not be reached" if s.url else "did not start"
            raise McpConnectError(f"MCP server {s.name!r} ({s.where}) {verb}: {why}"
                                  f"{self.stderr_tail()}")
        return self

    def stderr_tail(self) -> str:
        """'; stderr: <its last line>' of a stdio server that wrote any, else ''."""
        if self._errlog is not None:
            self._keep_tail()
        return f"; stderr: {self._stderr_last}" if self._stderr_last else ""

    def _keep_tail(self) -> None:
        assert self._errlog is not None
        with contextlib.suppress(OSError, ValueError):
            fd = self._errlog.fileno()  # the server writes to it directly, not through Python
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 4096, max(0, size - 4096)).decode("utf-8", "replace")
            lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
            if lines:
                self._stderr_last = lines[-1][:300]

    async def close(self) -> None:
        """End the session (stops a stdio server); idempotent."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 10.0)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _run(self) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open_transport(stack)
                _quiet_sdk()
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message))
                await session.initialize()
                self.session = session
                self._ready.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the transport failed or ended: the session is gone
            self.error = e
            log.debug("MCP server %r: session ended: %r", self.server.name, e)
        finally:
            self.session = None
            self._errlog = None

    async def _on_message(self, message: Any) -> None:
        """The session's incoming notifications and transport errors: count the latter."""
        if isinstance(message, Exception):
            self.protocol_errors += 1
            if not self.first_protocol_error:
                self.first_protocol_error = describe(message)
        await asyncio.sleep(0)

    async def _open_transport(self, stack: contextlib.AsyncExitStack) -> Any:
        s = self.server
        if s.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(create_mcp_http_client(headers=s.headers()))
            return await stack.enter_async_context(streamable_http_client(s.url, http_client=client))
        from mcp import StdioServerParameters, stdio_client

        argv = s.argv()
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=s.child_env(),
                                       cwd=s.cwd or None)
        self._errlog = stack.enter_context(
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))  # noqa: SIM115
        stack.callback(self._keep_tail)  # after the server stopped, before the file closes
        return await stack.enter_async_context(stdio_client(params, errlog=self._errlog))


def describe(e: BaseException) -> str:
    """One line for an exception, looking inside exception groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text[:200]}".rstrip(": ")

"""The event loop that owns every env-server connection of a process (MCP sessions, OpenEnv
WebSockets), on a thread of its own.

Env and tool calls run on short-lived event loops (envs/offload.py gives each call a fresh
one), but a connection is bound to the loop that opened it and must outlive a call. So
one daemon thread per process runs a loop for the whole life of the process; a tool call
hands its coroutine to that loop (`await on_host(coro)`) and waits from its own loop.
Cancelling the wait cancels the coroutine on the host loop. At process exit the
registered closers run (stdio and command servers are stopped) before the loop ends.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_EXIT_GRACE_S = 5.0

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_closers: list[Callable[[], Awaitable[None]]] = []


def host_loop() -> asyncio.AbstractEventLoop:
    """The process's env-server loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="env-host", daemon=True).start()
            _loop = loop
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule `coro` on the host loop (from any thread)."""
    return asyncio.run_coroutine_threadsafe(coro, host_loop())


async def on_host(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the host loop and await it from the calling loop."""
    loop = host_loop()
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # no loop runs in this thread
        running = None
    if running is loop:  # already on the host loop; what `coro` raises is the caller's
        return await coro
    return await asyncio.wrap_future(submit(coro))


def run_sync(coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """Run `coro` on the host loop and wait for it from synchronous code."""
    return submit(coro).result(timeout_s)


def at_exit(closer: Callable[[], Awaitable[None]]) -> None:
    """Run `await closer()` on the host loop when the process exits."""
    with _lock:
        _closers.append(closer)


def _shutdown() -> None:
    loop = _loop
    if loop is None or loop.is_closed():
        return

    async def close_all() -> None:
        await asyncio.gather(*(c() for c in _closers), return_exceptions=True)

    with contextlib.suppress(Exception):  # exiting: nothing left to report to
        asyncio.run_coroutine_threadsafe(close_all(), loop).result(_EXIT_GRACE_S)
    loop.call_soon_threadsafe(loop.stop)


atexit.register(_shutdown)

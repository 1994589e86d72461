"""Run env and tool coroutines off the caller's event loop, so blocking code cannot hang it.

An env or tool author may write `time.sleep(20)` (or a blocking HTTP call, a long CPU loop)
inside `async def`. On the actor's own loop that one call would freeze every episode of the
actor and no `asyncio.wait_for` could cut it: timeouts only fire when the loop runs.

`run_offloaded(fn, timeout_s, name)` therefore calls `fn` and runs the coroutine it returns on
a fresh event loop in
a daemon worker thread and waits for it on the caller's loop under `timeout_s`:

- a synchronous block is bounded by the timeout: the caller gets `OffloadTimeout` (a
  `TimeoutError`) on time, the other coroutines of its loop keep running;
- on timeout the coroutine is cancelled inside its thread (a cooperative hang, e.g. an
  `await` on a dead socket, ends there and frees the thread); a thread stuck in a synchronous
  call stays until that call returns, and is abandoned: daemon threads never block exit;
- at most `MAX_THREADS` calls run at once per process (bounded: a tool that blocks forever
  on every call fails calls with `OffloadBusy` instead of growing threads without limit);
- each slice of synchronous execution of the coroutine is timed; the first slice longer
  than `BLOCK_WARN_S` logs one warning per `name` (a blocking call inside async code).

Each call gets its own event loop: objects bound to a loop (asyncio locks, queues, client
sessions) must not be shared between calls; make them per call, or use threading primitives.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_THREADS = 512
"""Offloaded calls running (or stuck) at once in this process."""
BLOCK_WARN_S = 1.0
"""A synchronous slice longer than this is reported once per call name."""
_CANCEL_GRACE_S = 0.5
"""After a timeout, how long to wait for a cooperative coroutine to finish cancelling."""

BLOCKING_WARNING = "blocked its event loop"
"""The words of the blocking warning (`<name> blocked its event loop for 3.0 s ...`): the
launch finds them in an actor's log and says them on its console (run/output/events.py)."""

_lock = threading.Lock()
_running = 0
_warned: set[str] = set()


class OffloadTimeout(TimeoutError):
    """The call did not finish within its timeout."""


class OffloadBusy(RuntimeError):
    """`MAX_THREADS` offloaded calls are already running (some are probably stuck)."""


class _Timed:
    """Awaitable wrapper that times each synchronous slice of `fn()` and of the coroutine it
    returns (each `send`); a plain value returned by `fn` is the result."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.coro: Any = None
        self.slice_started: float | None = None
        self.longest = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        self.slice_started = t0 = time.perf_counter()
        try:
            made = self.fn()
        finally:
            self.longest = time.perf_counter() - t0
            self.slice_started = None
        if not inspect.isawaitable(made):
            return made
        self.coro = made.__await__() if not inspect.iscoroutine(made) else made
        send: Any = None
        throw: BaseException | None = None
        while True:
            self.slice_started = t0 = time.perf_counter()
            try:
                yielded = self.coro.throw(throw) if throw is not None else self.coro.send(send)
            except StopIteration as e:
                return e.value
            finally:
                self.longest = max(self.longest, time.perf_counter() - t0)
                self.slice_started = None
            try:
                send, throw = (yield yielded), None
            except GeneratorExit:
                self.coro.close()
                raise
            except BaseException as e:  # delivered into the coroutine (e.g. CancelledError)
                send, throw = None, e


class _Call:
    """One offloaded call: its thread runs `timed` to completion on a private loop and hands
    the outcome to `future` (on the caller's loop)."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        self.timed = _Timed(fn)
        self.name = name
        self.caller = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.caller.create_future()
        self.result: Any = None
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False

    def run(self) -> None:
        global _running
        try:
            with asyncio.Runner() as runner:
                self.loop = runner.get_loop()
                self.result = runner.run(self._main())
        except BaseException as e:  # handed to the waiting caller
            self.error = e
        finally:
            with _lock:
                _running -= 1
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody waits
                self.caller.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    async def _main(self) -> Any:
        self.task = asyncio.current_task()
        if self.cancelled:
            raise asyncio.CancelledError
        return await self.timed

    def cancel(self) -> None:
        self.cancelled = True
        loop, task = self.loop, self.task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to cancel
                loop.call_soon_threadsafe(task.cancel)

    def blocked_for(self) -> float:
        """Seconds the coroutine has been inside its current synchronous slice (0 if none)."""
        started = self.timed.slice_started
        return 0.0 if started is None else time.perf_counter() - started


def _warn_if_blocking(call: _Call) -> None:
    longest = max(call.timed.longest, call.blocked_for())
    if longest > BLOCK_WARN_S and call.name not in _warned:
        _warned.add(call.name)
        log.warning(
            "%s %s for %.1f s in one synchronous stretch: use async I/O "
            "or `await asyncio.to_thread(...)` for blocking work (warned once per name)",
            call.name, BLOCKING_WARNING, longest,
        )


async def run_offloaded(fn: Callable[[], Awaitable[T] | T], timeout_s: float, name: str) -> T:
    """Call `fn()` and await what it returns, both on a worker thread, under `timeout_s`;
    re-raises its exception. `fn` is e.g. `lambda: env.step(text)`: the call itself runs in the
    worker, so a synchronous `def` that blocks is bounded too.

    `name` (e.g. "tool calculator", "ArithEnv.step") appears in warnings and errors.
    """
    global _running
    with _lock:
        if _running >= MAX_THREADS:
            raise OffloadBusy(f"{name}: {MAX_THREADS} env/tool calls are still running or stuck")
        _running += 1
    call = _Call(fn, name)
    threading.Thread(target=call.run, name=f"offload:{name}", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(call.future), timeout_s)
        finished = True
    except TimeoutError:
        finished = False
    except asyncio.CancelledError:
        call.cancel()
        raise
    _warn_if_blocking(call)
    if not finished:
        blocked = call.blocked_for()
        call.cancel()
        await asyncio.wait([call.future], timeout=_CANCEL_GRACE_S)
        why = f" (blocked in a synchronous call for {blocked:.1f} s)" if blocked > 0.05 else ""
        raise OffloadTimeout(f"{name} took longer than {timeout_s:g} s{why}")
    if call.error is not None:
        raise call.error
    return call.result  # type: ignore[no-any-return]

"""Coalesced sends: the data messages an actor emits within one turn of its event loop leave
in one frame.

    emit(msg)   encode now (an encode error reaches the caller), append to the pending frame
                and, if none is scheduled, schedule a cut for the next loop turn
                (`loop.call_soon`): what is emitted before the producers yield to the loop
                goes out together, and nothing waits longer than the rest of the turn.
    cut         at the next turn, or inline once `max_batch` messages or `max_bytes` encoded
                bytes are pending: one message goes out as its own frame, several as one
                `messages.DataBatch` frame, in emit order.

Back-pressure, not loss: a frame that the full ZeroMQ pipe refuses waits (frames stay in
order) and is retried after `asyncio.sleep` with the actor's backoff (5 ms, doubling up to
0.2 s). `emit` awaits while `max_queued` messages or `4 * max_bytes` bytes are accepted but
not yet in the pipe, so a producer cannot grow memory without bound (until `release()`, at
shutdown). `flush()` returns once
everything accepted is in the pipe: call it before closing the pusher. A send that raises
stops the emitter: every later `emit`, `check` and `flush` raises `SendFailed`.
"""

from __future__ import annotations

import asyncio
from collections import deque

from agent_r1_async.wire.messages import DataMessage, encode, encode_data_batch
from agent_r1_async.wire.transport import Pusher

RETRY_S = 0.005
MAX_RETRY_S = 0.2


class SendFailed(RuntimeError):
    """The data pusher raised; messages accepted by `emit` may not have been sent."""


class BatchEmitter:
    """Sends data messages through `pusher`, coalescing those emitted in one loop turn."""

    def __init__(
        self,
        pusher: Pusher,
        max_batch: int = 64,
        max_bytes: int = 1 << 20,
        max_queued: int | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.max_bytes = max_bytes
        self.max_queued = 4 * max_batch if max_queued is None else max_queued
        if not 1 <= max_batch <= self.max_queued or max_bytes < 1:
            raise ValueError(
                f"need 1 <= max_batch <= max_queued and max_bytes >= 1, got "
                f"{max_batch}, {self.max_queued}, {max_bytes}"
            )
        self._pusher = pusher
        self._pending: list[bytes] = []  # encoded messages of the next frame
        self._pending_bytes = 0
        self._out: deque[tuple[bytes, int]] = deque()  # (frame, messages) the pipe refused
        self._out_bytes = 0
        self._queued = 0  # messages accepted by emit and not yet by the pusher
        self._scheduled = False
        self._retry: asyncio.Task | None = None
        self._room = asyncio.Event()
        self._released = False
        self.error: Exception | None = None
        self.sent = 0
        """Messages handed to the pusher."""
        self.frames = 0
        """Frames handed to the pusher."""

    async def emit(self, msg: DataMessage) -> None:
        """Accept one message for sending (in order); waits while too much is queued."""
        self.check()
        while not self._released and (
            self._queued >= self.max_queued
            or self._pending_bytes + self._out_bytes >= 4 * self.max_bytes
        ):  # only while frames wait for the pipe: the retry task sets _room
            self._room.clear()
            await self._room.wait()
            self.check()
        data = encode(msg)
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._queued += 1
        if len(self._pending) >= self.max_batch or self._pending_bytes >= self.max_bytes:
            self._cut()
            self.check()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._on_turn)

    async def flush(self) -> None:
        """Return once every accepted message is in the pipe; raises `SendFailed`."""
        if self._pending:
            self._cut()
        while self._out and self.error is None:
            if self._retry is None:
                self._pump()
            else:  # shielded: a cancelled flush leaves the retries running
                await asyncio.shield(self._retry)
        self.check()

    def release(self) -> None:
        """Stop back-pressure: from now on `emit` never waits (shutdown: in-flight episodes
        still record how they ended; memory is bounded by what they emit)."""
        self._released = True
        self._room.set()

    @property
    def queued(self) -> int:
        """Messages accepted by `emit` and not yet handed to the pusher."""
        return self._queued

    def check(self) -> None:
        """Raise `SendFailed` if a send failed."""
        if self.error is not None:
            raise SendFailed(f"sending data failed: {self.error!r}") from self.error

    @staticmethod
    def frame(items: list[bytes]) -> bytes:
        """The frame for these encoded messages: the message itself, or a DataBatch of several."""
        return items[0] if len(items) == 1 else encode_data_batch(items)

    # ---- internals ----------------------------------------------------------------------

    def _on_turn(self) -> None:
        self._scheduled = False
        if self._pending:
            self._cut()

    def _cut(self) -> None:
        items = self._pending
        self._pending, self._pending_bytes = [], 0
        try:
            frame = self.frame(items)
        except Exception as e:  # runs in a loop callback too: keep it for check()
            self._fail(e)
            return
        self._out.append((frame, len(items)))
        self._out_bytes += len(frame)
        if self._retry is None:  # else the pipe was full: the retry task keeps the backoff
            self._pump()

    def _pump(self) -> None:
        """Hand waiting frames to the pusher in order until it refuses one (pipe full)."""
        out = self._out
        try:
            while out:
                frame, n = out[0]
                if not self._pusher.send([frame], timeout_ms=0):
                    break
                out.popleft()
                self._out_bytes -= len(frame)
                self._queued -= n
                self.sent += n
                self.frames += 1
                self._room.set()
        except Exception as e:  # runs in a loop callback too: keep it for check()
            self._fail(e)
            return
        if out and self._retry is None:
            self._retry = asyncio.get_running_loop().create_task(self._retry_full_pipe())

    def _fail(self, e: Exception) -> None:
        if self.error is None:
            self.error = e
        self._room.set()  # waiting emits wake up and raise

    async def _retry_full_pipe(self) -> None:
        delay = RETRY_S
        try:
            while self._out and self.error is None:
                await asyncio.sleep(delay)
                before = len(self._out)
                self._pump()
                delay = RETRY_S if len(self._out) < before else min(delay * 2, MAX_RETRY_S)
        finally:
            self._retry = None

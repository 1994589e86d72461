"""A client of verifiers' `EnvServer` protocol: ZeroMQ DEALER to its ROUTER, msgpack bodies.

The protocol (verifiers 0.4, `verifiers/v1/serve/server.py`), spoken here without importing
verifiers (whose pins the trainer's environment cannot hold):
- a request is three frames `[request_id, method, msgpack(payload)]`; methods `health`,
  `run` (a `RunRequest`: task_data, client, model, sampling) and `cancel` ({request_id});
- the server answers a request with any number of `[request_id, b"delta", msgpack(delta)]`
  frames (a run's traces as they grow: `serve/delta.py`) and then exactly one
  `[request_id, b"reply", msgpack(response)]`, whose `success` and `error` say how it went.

`EnvServerClient.request` sends one request and returns its deltas and reply. A frame that
is not three parts, names no request in flight, has another kind, or does not decode is
rejected and counted (`rejected`); a bad body for a request in flight fails that request with
`EnvServerError`. Frames of a request the client gave up on (timed out, cancelled, failed)
are dropped quietly until its reply: the server finishes a cancelled run by replying. Every coroutine must run on one event loop (the one the client was first
used on), since the socket is bound to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import zmq
import zmq.asyncio

log = logging.getLogger(__name__)

_LINGER_MS = 0
_ABANDONED_KEPT = 4096
"""Requests given up on whose late frames are dropped quietly (the oldest forgotten first)."""


class EnvServerError(RuntimeError):
    """A request failed on the wire (timeout, a malformed answer, the client closed)."""


class EnvServerTimeout(EnvServerError):
    """A request got no reply within its timeout (a run is then cancelled on the server)."""


class _Pending:
    def __init__(self, on_delta: Callable[[dict[str, Any]], None] | None) -> None:
        self.deltas: list[dict[str, Any]] = []
        self.on_delta = on_delta
        self.done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()


class EnvServerClient:
    """Requests to one EnvServer at `address` (module docstring)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.rejected = 0
        """Frames rejected: wrong frame count, unknown request, unknown kind, bad msgpack."""
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, _LINGER_MS)
        self._sock.connect(address)
        self._pending: dict[bytes, _Pending] = {}
        self._abandoned: dict[bytes, None] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def request(self, method: str, payload: dict[str, Any], timeout_s: float,
                      on_delta: Callable[[dict[str, Any]], None] | None = None,
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(deltas, reply) of one request; EnvServerError on timeout (the run is cancelled on
        the server) or a malformed answer. `on_delta` sees each delta as it arrives."""
        if self._closed:
            raise EnvServerError(f"client of {self.address} is closed")
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read())
        rid = uuid.uuid4().hex.encode()
        pending = self._pending[rid] = _Pending(on_delta)
        try:
            await self._sock.send_multipart([rid, method.encode(),
                                             msgspec.msgpack.encode(payload)])
            try:
                reply = await asyncio.wait_for(asyncio.shield(pending.done), timeout_s)
            except TimeoutError:
                if method == "run":
                    await self._cancel(rid)
                raise EnvServerTimeout(f"{method} got no reply from {self.address} within "
                                     f"{timeout_s:g} s") from None
            return pending.deltas, reply
        except asyncio.CancelledError:
            if method == "run":
                await self._cancel(rid)
            raise
        finally:
            self._pending.pop(rid, None)
            replied = pending.done.done() and not pending.done.cancelled() \
                and pending.done.exception() is None
            if not replied:
                self._abandon(rid)

    def _abandon(self, rid: bytes) -> None:
        self._abandoned[rid] = None
        while len(self._abandoned) > _ABANDONED_KEPT:
            del self._abandoned[next(iter(self._abandoned))]

    async def _cancel(self, rid: bytes) -> None:
        cid = uuid.uuid4().hex.encode()
        self._abandon(cid)  # its reply is not waited for
        with contextlib.suppress(zmq.ZMQError):
            await self._sock.send_multipart(
                [cid, b"cancel", msgspec.msgpack.encode({"request_id": rid.decode()})])

    async def _read(self) -> None:
        while not self._closed:
            try:
                frames = await self._sock.recv_multipart()
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            self._take(frames)

    def _reject(self, why: str) -> None:
        self.rejected += 1
        log.warning("env server %s: frame rejected (%s)", self.address, why)

    def _take(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            return self._reject(f"{len(frames)} frames, expected 3")
        rid, kind, body = frames
        pending = self._pending.get(rid)
        if pending is None:
            if rid in self._abandoned:  # a request given up on: its reply ends it
                if kind == b"reply":
                    del self._abandoned[rid]
            else:
                self._reject(f"a {kind[:20].decode(errors='replace')} for no request in flight")
            return None
        if kind not in (b"delta", b"reply"):
            return self._reject(f"kind {kind[:20]!r}")
        try:
            data = msgspec.msgpack.decode(body)
        except msgspec.DecodeError as e:
            self._reject(f"undecodable {kind.decode()}: {e}")
            return self._fail(pending, f"the env server sent an undecodable {kind.decode()} ({e})")
        if not isinstance(data, dict):
            self._reject(f"a {kind.decode()} that is a {type(data).__name__}")
            return self._fail(pending, f"the env server sent a {kind.decode()} that is not a map")
        if pending.done.done():
            return None
        if kind == b"reply":
            pending.done.set_result(data)
            return None
        pending.deltas.append(data)
        if pending.on_delta is not None:
            pending.on_delta(data)
        return None

    @staticmethod
    def _fail(pending: _Pending, message: str) -> None:
        if not pending.done.done():
            pending.done.set_exception(EnvServerError(message))

    def close(self) -> None:
        """Close the socket; requests in flight fail with EnvServerError (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for pending in self._pending.values():
            self._fail(pending, f"the client of {self.address} closed")
        if self._reader is not None:
            self._reader.cancel()
        self._sock.close(_LINGER_MS)
        self._ctx.term()

"""The ZeroMQ transport (the flow-control invariants are in `transport.py`'s docstring).

CurveZMQ (wire/curve.py): binding sockets are servers, connecting sockets clients; a ZAP
authenticator in each binding process admits only the run's client public keys and names each
peer (`.user_id` on receiving sockets).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import zmq

from agent_r1_async.wire.curve import ZAP_DOMAIN, CurveKeys, RunAuthenticator, ZmqContext
from agent_r1_async.wire.transport import (
    DEFAULT_DATA_HWM,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PUB_HWM,
    DEFAULT_SUB_HWM,
    Frames,
    Receiver,
)

__all__ = [
    "CurveKeys",  # the transport's `curve` argument, importable from here with the transport
    "ZmqBroadcaster",
    "ZmqClient",
    "ZmqPoller",
    "ZmqPuller",
    "ZmqPusher",
    "ZmqServer",
    "ZmqSubscriber",
    "ZmqTransport",
]


class _ZmqSocket:
    def __init__(
        self, ctx: ZmqContext, kind: int, linger_ms: int, curve: CurveKeys | None = None
    ) -> None:
        self._sock = ctx.socket(kind)
        self._sock.setsockopt(zmq.LINGER, linger_ms)
        self._curve = curve
        self.endpoint = ""
        self.user_id: str | None = None
        """Receiving sockets: the authenticated identity (ZAP User-Id) of the sender of the
        message `recv` returned last; None without CurveZMQ."""

    def _sender(self, frame: zmq.Frame) -> str | None:
        """The ZAP User-Id libzmq attached to `frame` (CurveZMQ only)."""
        if self._curve is None:
            return None
        try:
            user = frame.get("User-Id")
        except zmq.ZMQError:  # no such property: the peer did not go through ZAP
            return None
        return user if isinstance(user, str) else None  # a text property: always str

    def _bind(self, endpoint: str) -> None:
        if self._curve is not None:
            if not self._curve.server_secret:
                raise ValueError(f"cannot bind {endpoint}: this process's CurveZMQ keys hold "
                                 "no server secret (it is not a server of the run)")
            self._sock.setsockopt(zmq.CURVE_SERVER, 1)
            self._sock.setsockopt(zmq.CURVE_SECRETKEY, self._curve.server_secret)
            self._sock.setsockopt(zmq.CURVE_PUBLICKEY, self._curve.server_public)
            self._sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
        if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            host = endpoint[len("tcp://") : -len(":0")]
            port = self._sock.bind_to_random_port(f"tcp://{host}")
            self.endpoint = f"tcp://{host}:{port}"
        else:
            self._sock.bind(endpoint)
            self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def _connect(self, endpoint: str) -> None:
        if self._curve is not None:
            if not self._curve.client_secret:
                raise ValueError(f"cannot connect to {endpoint}: this process's CurveZMQ keys "
                                 "hold no client key pair")
            self._sock.setsockopt(zmq.CURVE_SERVERKEY, self._curve.server_public)
            self._sock.setsockopt(zmq.CURVE_PUBLICKEY, self._curve.client_public)
            self._sock.setsockopt(zmq.CURVE_SECRETKEY, self._curve.client_secret)
        self._sock.connect(endpoint)
        self.endpoint = endpoint

    def _poll(self, timeout_ms: int | None, flags: int = zmq.POLLIN) -> bool:
        return bool(self._sock.poll(timeout_ms, flags))

    def close(self) -> None:
        if not self._sock.closed:
            self._sock.close()


class ZmqPusher(_ZmqSocket):
    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        hwm: int = DEFAULT_DATA_HWM,
        linger_ms: int = 1000,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.PUSH, linger_ms, curve)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._connect(endpoint)

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool:
        """Send one multipart message; False if the pipe stayed full for `timeout_ms`.

        Tries a non-blocking send first and polls only when the pipe is full: the common case
        costs one send instead of a poll plus a send.
        """
        if self._try_send(frames):
            return True
        if timeout_ms == 0 or not self._poll(timeout_ms, zmq.POLLOUT):
            return False
        return self._try_send(frames)

    def _try_send(self, frames: Frames) -> bool:
        try:
            if len(frames) == 1:  # the data plane's case: skip send_multipart's loop
                self._sock.send(frames[0], copy=False, flags=zmq.NOBLOCK)
            else:
                self._sock.send_multipart(frames, copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True


class ZmqPuller(_ZmqSocket):
    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        hwm: int = DEFAULT_DATA_HWM,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.PULL, 0, curve)
        self._sock.setsockopt(zmq.RCVHWM, hwm)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self._bind(endpoint)

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        """Receive one multipart message zero-copy (views of libzmq's message buffers).

        `Frame.more` is read from the received message itself; asking the socket
        (getsockopt RCVMORE) instead costs about as the receive.
        """
        if timeout_ms != 0 and not self._poll(timeout_ms):
            return None
        try:  # timeout_ms=0, the drain loop's case: one non-blocking recv, no poll
            frame = self._sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        self.user_id = self._sender(frame)
        frames = [frame.buffer]  # a memoryview of the frame: no copy
        while frame.more:  # the rest of a multipart message is already here
            frame = self._sock.recv(copy=False)
            frames.append(frame.buffer)
        return frames


class ZmqClient(_ZmqSocket):
    """DEALER that does one request at a time, re-creating itself after a timeout."""

    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        identity: str | None = None,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.DEALER, 0, curve)
        self._ctx = ctx
        self._identity = (identity or uuid.uuid4().hex).encode()
        self._target = endpoint
        self._setup()

    def _setup(self) -> None:
        self._sock.setsockopt(zmq.IDENTITY, self._identity)
        self._connect(self._target)

    def request(self, frames: Frames, timeout_ms: int) -> list[bytes] | None:
        self._sock.send_multipart(frames, copy=False)
        if self._poll(timeout_ms):
            return self._sock.recv_multipart()
        self._renew()  # lazy pirate: a late reply cannot answer the next request
        return None

    def reconnect(self, endpoint: str) -> None:
        self._target = endpoint
        self._renew()

    def _renew(self) -> None:
        self._sock.close(linger=0)
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._setup()  # re-applies the curve keys in _connect


class ZmqServer(_ZmqSocket):
    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.ROUTER, 0, curve)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A client that timed out reconnects with the same identity (lazy pirate); hand the
        # identity over to the new connection instead of refusing it while the old pipe lingers.
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self._bind(endpoint)

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, list[bytes]] | None:
        if not self._poll(timeout_ms):
            return None
        parts = self._sock.recv_multipart(copy=False)
        self.user_id = self._sender(parts[0])  # every frame of a message carries it
        return parts[0].bytes, [p.bytes for p in parts[1:]]

    def reply(self, peer: bytes, frames: Frames) -> bool:
        try:
            self._sock.send_multipart([peer, *frames], copy=False, flags=zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):  # peer gone (ROUTER_MANDATORY) or its pipe is full
            return False
        return True


class ZmqBroadcaster(_ZmqSocket):
    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        hwm: int = DEFAULT_PUB_HWM,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.PUB, 1000, curve)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._bind(endpoint)

    def publish(self, frames: Frames) -> None:
        self._sock.send_multipart(frames, copy=False)


class ZmqSubscriber(_ZmqSocket):
    def __init__(
        self,
        ctx: ZmqContext,
        endpoint: str,
        max_message_bytes: int = 8 * 1024**3,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.SUB, 0, curve)
        self._sock.setsockopt(zmq.RCVHWM, DEFAULT_SUB_HWM)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._connect(endpoint)

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        """Receive one multipart message zero-copy (frames are read-only memoryviews)."""
        if not self._poll(timeout_ms):
            return None
        return [f.buffer for f in self._sock.recv_multipart(copy=False)]


class ZmqPoller:
    """zmq.Poller over the transport's own receiving sockets."""

    def __init__(self, sockets: Sequence[Receiver]) -> None:
        self._poller = zmq.Poller()
        for s in sockets:
            if not isinstance(s, _ZmqSocket):
                raise TypeError(f"ZmqPoller waits on ZeroMQ sockets, got {type(s).__name__}")
            self._poller.register(s._sock, zmq.POLLIN)

    def wait(self, timeout_ms: int) -> bool:
        return bool(self._poller.poll(timeout_ms))


class ZmqTransport:
    """Factory for ZeroMQ sockets sharing one context (CurveZMQ-authenticated with `curve`)."""

    def __init__(self, ctx: ZmqContext | None = None, curve: CurveKeys | None = None) -> None:
        self.ctx = ctx or zmq.Context()
        self.curve = curve
        self._auth: RunAuthenticator | None = None

    def _server_side(self) -> CurveKeys | None:
        """Binding sockets need the ZAP authenticator running in this process."""
        if self.curve is not None and self._auth is None:
            self._auth = RunAuthenticator(self.ctx, self.curve)
            self._auth.start()
        return self.curve

    def puller(self, endpoint: str, **kw: int) -> ZmqPuller:
        return ZmqPuller(self.ctx, endpoint, curve=self._server_side(), **kw)

    def pusher(self, endpoint: str, **kw: int) -> ZmqPusher:
        return ZmqPusher(self.ctx, endpoint, curve=self.curve, **kw)

    def server(self, endpoint: str, **kw: int) -> ZmqServer:
        return ZmqServer(self.ctx, endpoint, curve=self._server_side(), **kw)

    def client(self, endpoint: str, identity: str | None = None) -> ZmqClient:
        return ZmqClient(self.ctx, endpoint, identity, curve=self.curve)

    def broadcaster(self, endpoint: str, **kw: int) -> ZmqBroadcaster:
        return ZmqBroadcaster(self.ctx, endpoint, curve=self._server_side(), **kw)

    def subscriber(self, endpoint: str, **kw: int) -> ZmqSubscriber:
        return ZmqSubscriber(self.ctx, endpoint, curve=self.curve, **kw)

    def poller(self, sockets: Sequence[Receiver]) -> ZmqPoller:
        return ZmqPoller(sockets)

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        self.ctx.destroy(linger=0)



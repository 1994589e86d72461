"""Transport: ZeroMQ sockets behind a tiny interface, plus an in-process twin for tests.

Six roles, each a small class with the same methods in both implementations:

    Puller  (binds)   <- Pusher  (connects)    data plane, many actors -> one buffer
    Server  (binds)   <- Client  (connects)    request/reply control (ROUTER <- DEALER)
    Publisher (binds) -> Subscriber (connects) weights, one learner -> many actors

Frames are bytes-like (bytes, memoryview, bytearray); multipart messages are delivered
atomically. Nothing here decodes payloads: `messages.py` does, with typed msgspec decoders.
The receiving sides of PUSH/PULL and PUB/SUB hand out memoryviews of the received messages
(no copy); the decoders copy what they keep.

Flow-control invariants (ZeroMQ implementation)
- PUSH/PULL: high-water marks of `hwm` messages on both sides (default 10,000). When the
  pipe is full, `Pusher.send` blocks up to `timeout_ms` and then returns False; it never drops
  a message by itself. The caller decides (actors wait and retry: accepted data is not lost).
- ROUTER/DEALER: `Client.request` sends and waits up to `timeout_ms` for the reply. On a
  timeout the client socket is closed and re-created (the "lazy pirate" pattern), so a late
  reply can never be mistaken for the answer to the next request. The server sets
  ROUTER_MANDATORY: a reply to a peer that has gone raises inside `reply`, which returns False.
- PUB/SUB: the publisher keeps at most `hwm` frames (default 1,000) per slow subscriber and
  drops whole messages beyond that. libzmq counts frames, and a weights message is one frame
  per tensor (~270 for SmolLM2), so the default holds about three versions of a 135M model:
  a slow actor skips versions (only the newest matters) and memory stays bounded.
- Receiving sockets set ZMQ_MAXMSGSIZE (`max_message_bytes`): a peer that sends a larger
  frame is disconnected by libzmq before the frame is buffered.
- Sockets bind to loopback unless a host is given. Binding to port 0 picks a free port;
  `.endpoint` is the address peers connect to.
- Authentication (`curve=CurveKeys`): binding sockets are CurveZMQ servers, connecting
  sockets are clients. A ZAP authenticator in each binding process admits only the run's
  client public key, so a peer without the run's keys can neither inject records nor pose as
  the weight publisher (a subscriber verifies the server key). `launch` generates the keys
  and hands them to the processes through Ray.
- Shutdown: `close()` uses a bounded linger (`linger_ms`, default 1 s for senders, 0 for
  receivers) so queued outgoing messages get a chance to leave but close never hangs.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Sequence
from typing import Protocol

import msgspec
import zmq
import zmq.auth.thread

Frames = Sequence[bytes | memoryview | bytearray]

DEFAULT_DATA_HWM = 10_000
DEFAULT_PUB_HWM = 1000
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ZAP_DOMAIN = "agent-r1-async"


class Pusher(Protocol):
    endpoint: str

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool: ...
    def close(self) -> None: ...


class Puller(Protocol):
    endpoint: str

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None: ...
    def close(self) -> None: ...


class Client(Protocol):
    endpoint: str

    def request(self, frames: Frames, timeout_ms: int) -> list[bytes] | None: ...
    def close(self) -> None: ...


class Server(Protocol):
    endpoint: str

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, list[bytes]] | None: ...
    def reply(self, peer: bytes, frames: Frames) -> bool: ...
    def close(self) -> None: ...


class Publisher(Protocol):
    endpoint: str

    def publish(self, frames: Frames) -> None: ...
    def close(self) -> None: ...


class Subscriber(Protocol):
    endpoint: str

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None: ...
    def close(self) -> None: ...


def tcp_endpoint(host: str = "127.0.0.1", port: int = 0) -> str:
    return f"tcp://{host}:{port}"


# --------------------------------------------------------------------------------------
# ZeroMQ
# --------------------------------------------------------------------------------------


class CurveKeys(msgspec.Struct, frozen=True):
    """One run's CurveZMQ keys (Z85 text): the servers' key pair and the clients' key pair."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def generate(cls) -> CurveKeys:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public, server_secret, client_public, client_secret)


class _AllowClientKey:
    """ZAP credentials provider: only the run's client public key may connect."""

    def __init__(self, client_public: bytes) -> None:
        self._allowed = client_public

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self._allowed  # pyzmq hands the client key over Z85-encoded


class _ZmqSocket:
    def __init__(
        self, ctx: zmq.Context, kind: int, linger_ms: int, curve: CurveKeys | None = None
    ) -> None:
        self._sock = ctx.socket(kind)
        self._sock.setsockopt(zmq.LINGER, linger_ms)
        self._curve = curve
        self.endpoint = ""

    def _bind(self, endpoint: str) -> None:
        if self._curve is not None:
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
        ctx: zmq.Context,
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
        ctx: zmq.Context,
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
        (getsockopt RCVMORE) instead costs about as much as the receive.
        """
        if timeout_ms != 0 and not self._poll(timeout_ms):
            return None
        try:  # timeout_ms=0, the drain loop's case: one non-blocking recv, no poll
            frame = self._sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        frames = [memoryview(frame)]
        while frame.more:  # the rest of a multipart message is already here
            frame = self._sock.recv(copy=False)
            frames.append(memoryview(frame))
        return frames


class ZmqClient(_ZmqSocket):
    """DEALER that does one request at a time, re-creating itself after a timeout."""

    def __init__(
        self,
        ctx: zmq.Context,
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
        # Lazy pirate: drop the socket so a late reply cannot answer the next request.
        self._sock.close(linger=0)
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._setup()  # re-applies the curve keys in _connect
        return None


class ZmqServer(_ZmqSocket):
    def __init__(
        self,
        ctx: zmq.Context,
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
        parts = self._sock.recv_multipart()
        return parts[0], parts[1:]

    def reply(self, peer: bytes, frames: Frames) -> bool:
        try:
            self._sock.send_multipart([peer, *frames], copy=False, flags=zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):  # peer gone (ROUTER_MANDATORY) or its pipe is full
            return False
        return True


class ZmqPublisher(_ZmqSocket):
    def __init__(
        self,
        ctx: zmq.Context,
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
        ctx: zmq.Context,
        endpoint: str,
        max_message_bytes: int = 8 * 1024**3,
        curve: CurveKeys | None = None,
    ) -> None:
        super().__init__(ctx, zmq.SUB, 0, curve)
        self._sock.setsockopt(zmq.RCVHWM, DEFAULT_PUB_HWM)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._connect(endpoint)

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        """Receive one multipart message zero-copy (frames are read-only memoryviews)."""
        if not self._poll(timeout_ms):
            return None
        return [f.buffer for f in self._sock.recv_multipart(copy=False)]


class ZmqTransport:
    """Factory for ZeroMQ sockets sharing one context (CurveZMQ-authenticated with `curve`)."""

    def __init__(self, ctx: zmq.Context | None = None, curve: CurveKeys | None = None) -> None:
        self.ctx = ctx or zmq.Context()
        self.curve = curve
        self._auth: zmq.auth.thread.ThreadAuthenticator | None = None

    def _server_side(self) -> CurveKeys | None:
        """Binding sockets need the ZAP authenticator running in this process."""
        if self.curve is not None and self._auth is None:
            self._auth = zmq.auth.thread.ThreadAuthenticator(self.ctx)
            self._auth.start()
            self._auth.configure_curve_callback(
                domain=ZAP_DOMAIN, credentials_provider=_AllowClientKey(self.curve.client_public)
            )
        return self.curve

    def puller(self, endpoint: str, **kw: int) -> ZmqPuller:
        return ZmqPuller(self.ctx, endpoint, curve=self._server_side(), **kw)

    def pusher(self, endpoint: str, **kw: int) -> ZmqPusher:
        return ZmqPusher(self.ctx, endpoint, curve=self.curve, **kw)

    def server(self, endpoint: str, **kw: int) -> ZmqServer:
        return ZmqServer(self.ctx, endpoint, curve=self._server_side(), **kw)

    def client(self, endpoint: str, identity: str | None = None) -> ZmqClient:
        return ZmqClient(self.ctx, endpoint, identity, curve=self.curve)

    def publisher(self, endpoint: str, **kw: int) -> ZmqPublisher:
        return ZmqPublisher(self.ctx, endpoint, curve=self._server_side(), **kw)

    def subscriber(self, endpoint: str, **kw: int) -> ZmqSubscriber:
        return ZmqSubscriber(self.ctx, endpoint, curve=self.curve, **kw)

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        self.ctx.destroy(linger=0)


# --------------------------------------------------------------------------------------
# In-process twin (unit tests): same interface over thread-safe queues
# --------------------------------------------------------------------------------------


def _copy(frames: Frames) -> list[bytes]:
    return [bytes(f) for f in frames]


class _Hub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queues: dict[str, queue.Queue] = {}
        self.subscribers: dict[str, list[queue.Queue]] = {}
        self.servers: dict[str, InProcServer] = {}
        self.count = 0

    def new_endpoint(self, endpoint: str) -> str:
        with self.lock:
            self.count += 1
            return endpoint if not endpoint.endswith(":0") else f"inproc://ep{self.count}"


class _InProcBase:
    endpoint = ""

    def close(self) -> None:
        pass


class InProcPuller(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str, hwm: int = DEFAULT_DATA_HWM) -> None:
        self.endpoint = hub.new_endpoint(endpoint)
        self.queue: queue.Queue = queue.Queue(maxsize=hwm)
        hub.queues[self.endpoint] = self.queue

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        try:
            msg = self.queue.get(timeout=None if timeout_ms is None else timeout_ms / 1000)
        except queue.Empty:
            return None
        return [memoryview(f) for f in msg]


class InProcPusher(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str) -> None:
        self.endpoint = endpoint
        self.queue: queue.Queue = hub.queues[endpoint]

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool:
        try:
            self.queue.put(
                _copy(frames), timeout=None if timeout_ms is None else timeout_ms / 1000
            )
        except queue.Full:
            return False
        return True


class InProcServer(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str) -> None:
        self.endpoint = hub.new_endpoint(endpoint)
        self.queue: queue.Queue = queue.Queue()
        self.replies: dict[bytes, queue.Queue] = {}
        hub.queues[self.endpoint] = self.queue
        hub.servers[self.endpoint] = self

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, list[bytes]] | None:
        try:
            return self.queue.get(timeout=None if timeout_ms is None else timeout_ms / 1000)
        except queue.Empty:
            return None

    def reply(self, peer: bytes, frames: Frames) -> bool:
        q = self.replies.get(peer)
        if q is None:
            return False
        q.put(_copy(frames))
        return True


class InProcClient(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str, identity: str | None = None) -> None:
        self.endpoint = endpoint
        self._identity = (identity or uuid.uuid4().hex).encode()
        self._server_queue: queue.Queue = hub.queues[endpoint]
        self._replies: queue.Queue = queue.Queue()
        self._hub = hub

    def request(self, frames: Frames, timeout_ms: int) -> list[bytes] | None:
        # Fresh reply queue per request: a late reply to an earlier one is never read.
        self._replies = queue.Queue()
        self._hub.servers[self.endpoint].replies[self._identity] = self._replies
        self._server_queue.put((self._identity, _copy(frames)))
        try:
            return self._replies.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None


class InProcPublisher(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str, hwm: int = DEFAULT_PUB_HWM) -> None:
        self.endpoint = hub.new_endpoint(endpoint)
        self._hub = hub
        self._hwm = hwm
        hub.subscribers.setdefault(self.endpoint, [])

    def publish(self, frames: Frames) -> None:
        msg = _copy(frames)
        for q in list(self._hub.subscribers[self.endpoint]):
            while q.qsize() >= self._hwm:  # drop the oldest, like a PUB at its high-water mark
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
            q.put(msg)


class InProcSubscriber(_InProcBase):
    def __init__(self, hub: _Hub, endpoint: str) -> None:
        self.endpoint = endpoint
        self.queue: queue.Queue = queue.Queue()
        hub.subscribers.setdefault(endpoint, []).append(self.queue)

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        try:
            msg = self.queue.get(timeout=None if timeout_ms is None else timeout_ms / 1000)
        except queue.Empty:
            return None
        return [memoryview(f) for f in msg]


class InProcTransport:
    """Same factory interface as `ZmqTransport`, over in-memory queues (one process)."""

    def __init__(self) -> None:
        self.hub = _Hub()

    def puller(self, endpoint: str = "inproc://:0", **kw: int) -> InProcPuller:
        return InProcPuller(self.hub, endpoint, **kw)

    def pusher(self, endpoint: str, **kw: int) -> InProcPusher:
        return InProcPusher(self.hub, endpoint)

    def server(self, endpoint: str = "inproc://:0", **kw: int) -> InProcServer:
        return InProcServer(self.hub, endpoint)

    def client(self, endpoint: str, identity: str | None = None) -> InProcClient:
        return InProcClient(self.hub, endpoint, identity)

    def publisher(self, endpoint: str = "inproc://:0", **kw: int) -> InProcPublisher:
        return InProcPublisher(self.hub, endpoint, **kw)

    def subscriber(self, endpoint: str, **kw: int) -> InProcSubscriber:
        return InProcSubscriber(self.hub, endpoint)

    def close(self) -> None:
        pass

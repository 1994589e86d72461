"""Transport: the interface every process talks through (ZeroMQ in `zmq.py`, in-process twin in
`inproc.py`). Nothing outside `wire/` imports zmq.

Six roles, each a small class with the same methods in both implementations:

    Puller  (binds)   <- Pusher  (connects)    data plane, many actors -> one buffer
    Server  (binds)   <- Client  (connects)    request/reply control (ROUTER <- DEALER)
    Broadcaster (binds) -> Subscriber (connects) weights, one learner -> many actors

A `Poller` waits on several receiving sockets of one transport at once (the buffer's loop
waits on its data and control sockets together). Frames are bytes-like (bytes, memoryview, bytearray); multipart messages are delivered
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
- PUB/SUB: libzmq's high-water marks count whole *messages* (a multipart message of any
  size is one), not frames or bytes. A weights message is a whole model, so the `Broadcaster`'s
  SNDHWM is 1 (`DEFAULT_PUB_HWM`): a subscriber that stops reading holds at most two versions
  in the `Broadcaster`'s process, the one waiting in its pipe and the one its TCP engine is
  writing; later versions are dropped for it (only the newest matters). The bound is per
  subscriber: with zero-copy sends, n stalled subscribers pin at most 2n versions (fewer when
  they stalled on the same ones). Subscribers keep at most `DEFAULT_SUB_HWM` (2) received
  versions in their own process. (Conflation is not an option: ZMQ_CONFLATE drops multipart
  messages.) `tests/integration/test_pub_memory.py` measures it.
- Receiving sockets set ZMQ_MAXMSGSIZE (`max_message_bytes`): a peer that sends a larger
  frame is disconnected by libzmq before the frame is buffered.
- Sockets bind to loopback unless a host is given. Binding to port 0 picks a free port;
  `.endpoint` is the address peers connect to.
- Authentication (`curve=CurveKeys`, wire/curve.py; `launch.curve`, on by default): binding
  sockets are CurveZMQ servers, connecting sockets clients, each process with its own client
  key pair. A ZAP authenticator in each binding process admits only the run's client public
  keys and names each peer by its key (ZAP User-Id), which receiving sockets expose as
  `.user_id` for the role checks (wire/roles.py). A peer without a run key can neither
  connect, inject records, subscribe to the weights nor pose as a server (clients verify the
  server key). `launch` generates the keys and hands each process its own through Ray.
- Shutdown: `close()` uses a bounded linger (`linger_ms`, default 1 s for senders, 0 for
  receivers) so queued outgoing messages get a chance to leave but close never hangs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

Frames = Sequence[bytes | memoryview | bytearray]

DEFAULT_DATA_HWM = 10_000
DEFAULT_PUB_HWM = 1
"""Weights PUB SNDHWM in messages: a stalled subscriber pins <= 2 versions (module docstring)."""
DEFAULT_SUB_HWM = 2
"""Weights SUB RCVHWM in messages: what an actor holds between two polls."""
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@runtime_checkable
class Pusher(Protocol):
    endpoint: str

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool: ...
    def close(self) -> None: ...


@runtime_checkable
class Puller(Protocol):
    endpoint: str
    user_id: str | None
    """The authenticated sender of the last message `recv` returned (wire/roles.py)."""

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None: ...
    def close(self) -> None: ...


@runtime_checkable
class Client(Protocol):
    endpoint: str

    def request(self, frames: Frames, timeout_ms: int) -> list[bytes] | None: ...
    def reconnect(self, endpoint: str) -> None:
        """From now on talk to the server at `endpoint` (the same identity)."""
        ...
    def close(self) -> None: ...


@runtime_checkable
class Server(Protocol):
    endpoint: str
    user_id: str | None
    """The authenticated sender of the last request `recv` returned (wire/roles.py)."""

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, list[bytes]] | None: ...
    def reply(self, peer: bytes, frames: Frames) -> bool: ...
    def close(self) -> None: ...


@runtime_checkable
class Broadcaster(Protocol):
    endpoint: str

    def publish(self, frames: Frames) -> None: ...
    def close(self) -> None: ...


@runtime_checkable
class Subscriber(Protocol):
    endpoint: str

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None: ...
    def close(self) -> None: ...


Receiver = Puller | Server | Subscriber


@runtime_checkable
class Poller(Protocol):
    """Waits until one of its sockets has a message (or the timeout passes)."""

    def wait(self, timeout_ms: int) -> bool:
        """True when a registered socket is readable; False after `timeout_ms`."""
        ...


@runtime_checkable
class Transport(Protocol):
    """A factory of sockets sharing one context: what every process is handed."""

    def puller(self, endpoint: str, **kw: int) -> Puller: ...
    def pusher(self, endpoint: str, **kw: int) -> Pusher: ...
    def server(self, endpoint: str, **kw: int) -> Server: ...
    def client(self, endpoint: str, identity: str | None = None) -> Client: ...
    def broadcaster(self, endpoint: str, **kw: int) -> Broadcaster: ...
    def subscriber(self, endpoint: str, **kw: int) -> Subscriber: ...
    def poller(self, sockets: Sequence[Receiver]) -> Poller: ...
    def close(self) -> None: ...


def tcp_endpoint(host: str = "127.0.0.1", port: int = 0) -> str:
    return f"tcp://{host}:{port}"



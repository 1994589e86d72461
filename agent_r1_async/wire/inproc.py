"""The in-process twin of the ZeroMQ transport (tests): same interface over thread-safe queues.

Every receiving socket's queue belongs to one hub; each put notifies the hub's condition, so
`InProcPoller.wait` sleeps until a message arrives instead of polling on a timer. Receivers
hand out memoryviews of copied frames, like ZeroMQ's zero-copy receive.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Sequence
from typing import Generic, TypeVar

from agent_r1_async.wire.transport import (
    DEFAULT_DATA_HWM,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PUB_HWM,
    Frames,
    Receiver,
)

_Message = list[bytes]
"""What a puller, a subscriber or a client receives: the frames, copied."""
_Request = tuple[bytes, _Message]
"""What a server receives: the client's identity and the frames."""
_Item = TypeVar("_Item", _Message, _Request)


def _copy(frames: Frames) -> _Message:
    return [bytes(f) for f in frames]


def _timeout(timeout_ms: int | None) -> float | None:
    return None if timeout_ms is None else timeout_ms / 1000


class _Hub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrived = threading.Condition()
        self.queues: dict[str, queue.Queue[_Message]] = {}
        """Pullers' queues by endpoint (servers are in `servers`)."""
        self.subscribers: dict[str, list[queue.Queue[_Message]]] = {}
        self.servers: dict[str, InProcServer] = {}
        self.count = 0

    def new_endpoint(self, endpoint: str) -> str:
        with self.lock:
            self.count += 1
            return endpoint if not endpoint.endswith(":0") else f"inproc://ep{self.count}"

    def put(self, q: queue.Queue[_Item], item: _Item, timeout_ms: int | None = None) -> None:
        """Put and wake every poller (raises queue.Full after `timeout_ms`)."""
        q.put(item, timeout=_timeout(timeout_ms))
        with self.arrived:
            self.arrived.notify_all()


class _InProcReceiver(Generic[_Item]):
    endpoint = ""
    user_id: str | None = None  # nothing in one process is authenticated
    queue: queue.Queue[_Item]

    def close(self) -> None:
        pass


class InProcPuller(_InProcReceiver[_Message]):
    def __init__(
        self,
        hub: _Hub,
        endpoint: str,
        hwm: int = DEFAULT_DATA_HWM,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.endpoint = hub.new_endpoint(endpoint)
        self.queue = queue.Queue(maxsize=hwm)
        self.max_message_bytes = max_message_bytes
        hub.queues[self.endpoint] = self.queue

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        while True:
            try:
                msg = self.queue.get(timeout=_timeout(timeout_ms))
            except queue.Empty:
                return None
            # Like ZMQ_MAXMSGSIZE: an oversized message never reaches the receiver.
            if all(len(f) <= self.max_message_bytes for f in msg):
                return [memoryview(f) for f in msg]


class InProcPusher:
    def __init__(self, hub: _Hub, endpoint: str) -> None:
        self.endpoint = endpoint
        self._hub = hub
        self.queue = hub.queues[endpoint]

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool:
        try:
            self._hub.put(self.queue, _copy(frames), timeout_ms)
        except queue.Full:
            return False
        return True

    def close(self) -> None:
        pass


class InProcServer(_InProcReceiver[_Request]):
    def __init__(
        self, hub: _Hub, endpoint: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> None:
        self.endpoint = hub.new_endpoint(endpoint)
        self.queue = queue.Queue()
        self.max_message_bytes = max_message_bytes
        self.replies: dict[bytes, queue.Queue[_Message]] = {}
        hub.servers[self.endpoint] = self

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, list[bytes]] | None:
        while True:
            try:
                peer, frames = self.queue.get(timeout=_timeout(timeout_ms))
            except queue.Empty:
                return None
            if all(len(f) <= self.max_message_bytes for f in frames):
                return peer, frames

    def reply(self, peer: bytes, frames: Frames) -> bool:
        q = self.replies.get(peer)
        if q is None:
            return False
        q.put(_copy(frames))
        return True


class InProcClient:
    def __init__(self, hub: _Hub, endpoint: str, identity: str | None = None) -> None:
        self._identity = (identity or uuid.uuid4().hex).encode()
        self._replies: queue.Queue[_Message] = queue.Queue()
        self._hub = hub
        self.reconnect(endpoint)

    def reconnect(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._server_queue = self._hub.servers[endpoint].queue

    def request(self, frames: Frames, timeout_ms: int) -> list[bytes] | None:
        # Fresh reply queue per request: a late reply to an earlier one is never read.
        self._replies = queue.Queue()
        self._hub.servers[self.endpoint].replies[self._identity] = self._replies
        self._hub.put(self._server_queue, (self._identity, _copy(frames)))
        try:
            return self._replies.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


class InProcBroadcaster:
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
            self._hub.put(q, msg)

    def close(self) -> None:
        pass


class InProcSubscriber(_InProcReceiver[_Message]):
    def __init__(self, hub: _Hub, endpoint: str) -> None:
        self.endpoint = endpoint
        self.queue = queue.Queue()
        hub.subscribers.setdefault(endpoint, []).append(self.queue)

    def recv(self, timeout_ms: int | None = None) -> list[memoryview] | None:
        try:
            msg = self.queue.get(timeout=_timeout(timeout_ms))
        except queue.Empty:
            return None
        return [memoryview(f) for f in msg]


class InProcPoller:
    """Sleeps on the hub's condition until one of its sockets' queues holds a message."""

    def __init__(self, hub: _Hub, sockets: Sequence[Receiver]) -> None:
        self._queues: list[queue.Queue[_Message] | queue.Queue[_Request]] = []
        for s in sockets:
            if not isinstance(s, _InProcReceiver):
                raise TypeError(f"InProcPoller waits on in-process sockets, got {type(s).__name__}")
            self._queues.append(s.queue)
        self._hub = hub

    def wait(self, timeout_ms: int) -> bool:
        with self._hub.arrived:
            return self._hub.arrived.wait_for(
                lambda: any(not q.empty() for q in self._queues), timeout=timeout_ms / 1000
            )


class InProcTransport:
    """Same factory interface as `ZmqTransport`, over in-memory queues (one process)."""

    def __init__(self) -> None:
        self.hub = _Hub()

    def puller(self, endpoint: str = "inproc://:0", **kw: int) -> InProcPuller:
        return InProcPuller(self.hub, endpoint, **kw)

    def pusher(self, endpoint: str, **kw: int) -> InProcPusher:
        return InProcPusher(self.hub, endpoint)

    def server(self, endpoint: str = "inproc://:0", **kw: int) -> InProcServer:
        return InProcServer(self.hub, endpoint, **kw)

    def client(self, endpoint: str, identity: str | None = None) -> InProcClient:
        return InProcClient(self.hub, endpoint, identity)

    def broadcaster(self, endpoint: str = "inproc://:0", **kw: int) -> InProcBroadcaster:
        return InProcBroadcaster(self.hub, endpoint, **kw)

    def subscriber(self, endpoint: str, **kw: int) -> InProcSubscriber:
        return InProcSubscriber(self.hub, endpoint)

    def poller(self, sockets: Sequence[Receiver]) -> InProcPoller:
        return InProcPoller(self.hub, sockets)

    def close(self) -> None:
        pass

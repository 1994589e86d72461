"""Transport fakes: an in-process transport whose pushers note every send and close (and can
refuse sends), and a pusher whose socket is gone."""

from __future__ import annotations

from collections.abc import Sequence

from agent_r1_async.wire.inproc import (
    InProcBroadcaster,
    InProcClient,
    InProcPoller,
    InProcPuller,
    InProcPusher,
    InProcServer,
    InProcSubscriber,
    InProcTransport,
)
from agent_r1_async.wire.transport import Frames, Receiver


class RecordingPusher:
    """Notes each send and the close, in order; `full` refuses every send (a pipe that stays
    full: the buffer stopped reading)."""

    def __init__(self, inner: InProcPusher, events: list[str], full: bool = False) -> None:
        self.inner, self.events, self.endpoint, self.full = inner, events, inner.endpoint, full

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool:
        ok = not self.full and self.inner.send(frames, timeout_ms)
        if ok:
            self.events.append("send")
        return ok

    def close(self) -> None:
        self.events.append("close")
        self.inner.close()


class BrokenPusher:
    """Every send raises, as a closed ZeroMQ socket does."""

    endpoint = "broken"

    def send(self, frames: Frames, timeout_ms: int | None = None) -> bool:
        raise RuntimeError("socket closed")

    def close(self) -> None:
        pass


class RecordingTransport:
    """An `InProcTransport` whose pushers are `RecordingPusher`s sharing one `events` list;
    every other socket is the in-process one."""

    def __init__(self, full: bool = False) -> None:
        self.inner = InProcTransport()
        self.events: list[str] = []
        self.full = full

    def pusher(self, endpoint: str, **kw: int) -> RecordingPusher:
        return RecordingPusher(self.inner.pusher(endpoint, **kw), self.events, self.full)

    def puller(self, endpoint: str = "inproc://:0", **kw: int) -> InProcPuller:
        return self.inner.puller(endpoint, **kw)

    def server(self, endpoint: str = "inproc://:0", **kw: int) -> InProcServer:
        return self.inner.server(endpoint, **kw)

    def client(self, endpoint: str, identity: str | None = None) -> InProcClient:
        return self.inner.client(endpoint, identity)

    def broadcaster(self, endpoint: str = "inproc://:0", **kw: int) -> InProcBroadcaster:
        return self.inner.broadcaster(endpoint, **kw)

    def subscriber(self, endpoint: str, **kw: int) -> InProcSubscriber:
        return self.inner.subscriber(endpoint, **kw)

    def poller(self, sockets: Sequence[Receiver]) -> InProcPoller:
        return self.inner.poller(sockets)

    def close(self) -> None:
        self.inner.close()

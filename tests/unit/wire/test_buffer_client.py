"""The buffer client survives slow or lost replies: it retries with backoff and counts them."""

from __future__ import annotations

import threading

import pytest

from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.inproc import InProcTransport
from agent_r1_async.wire.transport import Transport
from agent_r1_async.wire.zmq import ZmqTransport


class _LossyServer:
    """Answers CreditRequests with a grant, but drops the first `drop` requests unanswered
    (a reply lost, or a buffer too busy to answer within the client's timeout)."""

    def __init__(self, transport: Transport, drop: int, endpoint: str = "inproc://:0") -> None:
        self.server = transport.server(endpoint)
        self.drop, self.seen = drop, 0
        self.got_one = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            got = self.server.recv(20)
            if got is None:
                continue
            peer, frames = got
            self.seen += 1
            self.got_one.set()
            if self.seen <= self.drop:
                continue
            req = m.decode_control(frames[0])
            assert isinstance(req, m.CreditRequest)
            ids = [f"g{self.seen}-{i}" for i in range(req.max_groups)]
            grant = m.CreditGrant(req.actor_id, req.max_groups, 7, group_ids=ids)
            self.server.reply(peer, [m.encode(grant)])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def transport() -> InProcTransport:
    return InProcTransport()


def test_a_lost_reply_costs_a_retry_not_the_caller(transport):
    server = _LossyServer(transport, drop=2)
    client = BufferClient(transport, server.server.endpoint, "actor", "a0", timeout_s=0.1,
                          retries=3, backoff_s=0.01)
    try:
        grant = client.request_credits(2)
    finally:
        server.close()
    # Requests 1 and 2 went unanswered; the third was granted: ids minted by that answer.
    assert (server.seen, client.timeouts) == (3, 2)
    assert grant.group_ids == ["g3-0", "g3-1"] and grant.learner_version == 7


def test_no_reply_after_every_retry_raises_naming_the_tries(transport):
    server = _LossyServer(transport, drop=100)
    client = BufferClient(transport, server.server.endpoint, "actor", "a0", timeout_s=0.1,
                          retries=2, backoff_s=0.01)
    try:
        with pytest.raises(TimeoutError, match=r"CreditRequest within 0\.1 s \(3 tries\)"):
            client.request_credits(1)
    finally:
        server.close()
    assert (server.seen, client.timeouts) == (3, 3)


@pytest.mark.parametrize("kind", ["inproc", "zmq"])
def test_a_retargeted_client_asks_the_buffer_at_its_new_endpoint(kind):
    """A buffer restarted on another node listens elsewhere: `retarget` (from the launcher's
    thread) sends the next request there; the old endpoint never hears of it."""
    transport: Transport = InProcTransport() if kind == "inproc" else ZmqTransport()
    where = "inproc://:0" if kind == "inproc" else "tcp://127.0.0.1:0"
    old, new = _LossyServer(transport, 100, where), _LossyServer(transport, 0, where)
    client = BufferClient(transport, old.server.endpoint, "actor", "a0", timeout_s=2.0,
                          retries=0)
    try:
        client.retarget(new.server.endpoint)
        grant = client.request_credits(1)
    finally:
        old.close(), new.close(), client.close(), transport.close()
    assert (old.seen, new.seen, client.timeouts) == (0, 1, 0)
    assert grant.group_ids == ["g1-0"]


def test_a_request_waiting_on_a_lost_buffer_goes_to_the_new_one_on_its_next_try(transport):
    """Retargeted while a request waits on the old endpoint: that try times out (one lost
    reply), the next try asks the new buffer."""
    old, new = _LossyServer(transport, drop=100), _LossyServer(transport, drop=0)
    client = BufferClient(transport, old.server.endpoint, "actor", "a0", timeout_s=0.5,
                          retries=2, backoff_s=0.01)
    moved = threading.Thread(target=lambda: (old.got_one.wait(5),
                                             client.retarget(new.server.endpoint)))
    moved.start()
    try:
        grant = client.request_credits(2)
    finally:
        moved.join(5), old.close(), new.close()
    assert (old.seen, new.seen, client.timeouts) == (1, 1, 1)
    assert grant.group_ids == ["g1-0", "g1-1"]

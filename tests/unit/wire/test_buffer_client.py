"""The buffer client survives slow or lost replies: it retries with backoff and counts them."""

from __future__ import annotations

import threading

import pytest

from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.inproc import InProcTransport


class _LossyServer:
    """Answers CreditRequests with a grant, but drops the first `drop` requests unanswered
    (a reply lost, or a buffer too busy to answer within the client's timeout)."""

    def __init__(self, transport: InProcTransport, drop: int) -> None:
        self.server = transport.server()
        self.drop, self.seen = drop, 0
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

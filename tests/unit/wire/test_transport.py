"""Transport: ZeroMQ and in-process twins behave the same on the interface."""

from __future__ import annotations

import threading
import time

import pytest

from agent_r1_async.wire.inproc import InProcTransport
from agent_r1_async.wire.zmq import ZmqTransport


@pytest.fixture(params=["zmq", "inproc"])
def transport(request):
    t = ZmqTransport() if request.param == "zmq" else InProcTransport()
    yield t
    if isinstance(t, ZmqTransport):
        t.ctx.destroy(linger=0)


def _receive(puller, count: int, timeout_s: float, take) -> list:
    """Non-blocking receives until `count` items (what `take(frames)` returns) or the timeout."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        frames = puller.recv(timeout_ms=0)
        if frames is None:
            time.sleep(0.002)
        else:
            got.extend(take(frames))
    return got


def test_push_pull_multipart(transport):
    puller = transport.puller("tcp://127.0.0.1:0")
    pusher = transport.pusher(puller.endpoint)
    try:
        assert puller.endpoint.startswith(("tcp://127.0.0.1:", "inproc://"))
        assert pusher.send([b"a", memoryview(b"bc")], timeout_ms=1000)
        assert puller.recv(timeout_ms=2000) == [b"a", b"bc"]
        assert puller.recv(timeout_ms=10) is None
    finally:
        pusher.close()
        puller.close()


def test_non_blocking_drain_keeps_messages_whole_and_in_order(transport):
    puller = transport.puller("tcp://127.0.0.1:0")
    pusher = transport.pusher(puller.endpoint)
    try:
        assert puller.recv(timeout_ms=0) is None  # nothing yet: None, no wait, no error
        sent = [[b"a", b"b"], [b"c"], [b"d", b"", b"e"]]
        for frames in sent:
            assert pusher.send(frames, timeout_ms=0) or pusher.send(frames, timeout_ms=1000)
        got = _receive(puller, len(sent), 5, lambda frames: [[bytes(f) for f in frames]])
        assert got == sent
        assert puller.recv(timeout_ms=0) is None
    finally:
        pusher.close()
        puller.close()


def test_request_reply_and_timeout_recovery(transport):
    server = transport.server("tcp://127.0.0.1:0")
    client = transport.client(server.endpoint, identity="c1")
    answered = []

    def serve(n: int) -> None:
        for _ in range(n):
            got = server.recv(timeout_ms=3000)
            assert got is not None
            peer, frames = got
            if frames[0] == b"ignore":
                continue
            answered.append(server.reply(peer, [b"re:" + frames[0]]))

    t = threading.Thread(target=serve, args=(3,))
    t.start()
    try:
        assert client.request([b"x"], timeout_ms=3000) == [b"re:x"]
        # The server ignores this one: the client times out and must not read a stale reply.
        assert client.request([b"ignore"], timeout_ms=200) is None
        assert client.request([b"y"], timeout_ms=3000) == [b"re:y"]
    finally:
        t.join(5)
        client.close()
        server.close()
    assert answered == [True, True]


def test_reply_to_unknown_peer_returns_false(transport):
    server = transport.server("tcp://127.0.0.1:0")
    try:
        assert server.reply(b"nobody", [b"x"]) is False
    finally:
        server.close()


def test_pub_sub_zero_copy_frames(transport):
    import time

    pub = transport.broadcaster("tcp://127.0.0.1:0")
    sub = transport.subscriber(pub.endpoint)
    try:
        payload = bytes(range(256)) * 1000
        got = None
        deadline = time.monotonic() + 5
        while got is None and time.monotonic() < deadline:  # slow joiner: publish until seen
            pub.publish([b"hdr", memoryview(payload)])
            got = sub.recv(timeout_ms=100)
        assert got is not None
        assert bytes(got[0]) == b"hdr" and bytes(got[1]) == payload
        assert isinstance(got[1], memoryview)
    finally:
        sub.close()
        pub.close()


def test_zmq_push_reports_full_pipe_instead_of_dropping():
    t = ZmqTransport()
    try:
        puller = t.puller("tcp://127.0.0.1:0", hwm=1)
        pusher = t.pusher(puller.endpoint, hwm=1)
        sent = 0
        # Nobody receives: after the pipes fill, send returns False (it never drops silently).
        for _ in range(10_000):
            if not pusher.send([b"x" * 1024], timeout_ms=20):
                break
            sent += 1
        assert 0 < sent < 10_000
        received = 0
        while puller.recv(timeout_ms=200) is not None:
            received += 1
        assert received == sent
    finally:
        t.ctx.destroy(linger=0)


def test_zmq_oversized_frame_is_refused():
    t = ZmqTransport()
    try:
        puller = t.puller("tcp://127.0.0.1:0", max_message_bytes=1024)
        pusher = t.pusher(puller.endpoint)
        pusher.send([b"x" * 4096], timeout_ms=1000)
        assert puller.recv(timeout_ms=300) is None  # libzmq drops the peer, not the service
        pusher2 = t.pusher(puller.endpoint)
        pusher2.send([b"ok"], timeout_ms=1000)
        assert puller.recv(timeout_ms=2000) == [b"ok"]
    finally:
        t.ctx.destroy(linger=0)


def test_curve_keys_admit_the_run_and_refuse_a_stranger():
    from agent_r1_async.wire.zmq import CurveKeys

    keys = CurveKeys.generate()
    server_side = ZmqTransport(curve=keys)
    honest = ZmqTransport(curve=keys)
    stranger_keys = CurveKeys.generate()
    # A stranger that even knows the server's public key but not the run's client key pair.
    stranger = ZmqTransport(curve=CurveKeys(keys.server_public, keys.server_secret,
                                            stranger_keys.client_public,
                                            stranger_keys.client_secret))
    plain = ZmqTransport()
    try:
        puller = server_side.puller("tcp://127.0.0.1:0")
        for t in (stranger, plain):
            t.pusher(puller.endpoint).send([b"evil"], timeout_ms=500)
        assert puller.recv(timeout_ms=700) is None
        assert honest.pusher(puller.endpoint).send([b"good"], timeout_ms=2000)
        assert puller.recv(timeout_ms=3000) == [b"good"]
        # A rogue PUB socket without the server secret cannot feed an honest subscriber.
        rogue_keys = CurveKeys.generate()
        rogue = ZmqTransport(curve=CurveKeys(keys.server_public, rogue_keys.server_secret,
                                             keys.client_public, keys.client_secret))
        try:
            pub = rogue.broadcaster("tcp://127.0.0.1:0")
            sub = honest.subscriber(pub.endpoint)
            for _ in range(10):
                pub.publish([b"fake-weights"])
                assert sub.recv(timeout_ms=50) is None
        finally:
            rogue.close()
    finally:
        for t in (server_side, honest, stranger, plain):
            t.close()


def test_zmq_received_frames_are_views_and_decoded_values_outlive_them():
    """The puller hands out views of libzmq's messages (no copy); what `messages` decodes from
    them owns its memory, so it stays intact after the frames are freed and memory reused."""
    from agent_r1_async.wire import messages as m

    t = ZmqTransport()
    try:
        puller = t.puller("tcp://127.0.0.1:0")
        pusher = t.pusher(puller.endpoint)
        sent = [
            m.StepRecord(f"e{i}", "g", "t", "a0", "env", i, m.TokenIds(range(i, i + 700)),
                         m.TokenIds([i] * 64), m.LogProbs([-i / 7] * 64), policy_version=i,
                         finish_reason=f"stop-{i}", token_versions=[i, i + 1])
            for i in range(200)
        ]
        for rec in sent:
            assert pusher.send([m.encode(rec)], timeout_ms=2000)

        def take(frames: list) -> list:
            assert len(frames) == 1 and isinstance(frames[0], memoryview)
            items = list(m.unpack_data(frames))
            frames[0].release()  # BufferError if a decoded value still exported the frame
            return items  # the zmq message is freed; later receives reuse its memory

        got = _receive(puller, len(sent), 10, take)
        assert got == sent
    finally:
        t.ctx.destroy(linger=0)

"""Hostile frames over real sockets: floods, wrong shapes and oversized frames are counted or
refused, and an honest peer is served during the flood.

The property-based versions (10,000 cases per socket type, through the same decode + dispatch
code in-process) are in tests/unit/wire/test_hostile_frames.py; these show the same on the wire:
every garbage frame on the data PULL and the control ROUTER is counted exactly, a frame over
`buffer.max_frame_bytes` gets its sender disconnected by libzmq before it is buffered, and a
weight subscriber fed garbage by its sender counts it and still takes the next good version.
"""

from __future__ import annotations

import random
import threading
import time

import torch

from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.records import group_records
from tests.fakes.services import buffer_service, granted, wait_for

FLOOD = 20_000
MAX_FRAME = 1 << 16


def _garbage(rng: random.Random, n: int) -> list[list[bytes]]:
    """Random bytes, truncated records, control messages, wrong frame counts."""
    good = m.encode(group_records("g", [0.0, 1.0])[0])
    kinds = [
        lambda: [rng.randbytes(rng.randint(0, 40))],
        lambda: [good[: rng.randint(0, len(good) - 1)]],
        lambda: [m.encode(m.Hello(m.SCHEMA_VERSION + 1, "actor", "old"))],
        lambda: [m.encode(m.WeightsHeader(m.SCHEMA_VERSION, 1, [], 0.0))],
        lambda: [good, good],
    ]
    return [rng.choice(kinds)() for _ in range(n)]


def test_data_socket_counts_a_flood_and_keeps_serving() -> None:
    transport = ZmqTransport()
    service = buffer_service(transport, start=True, max_frame_bytes=MAX_FRAME)
    flooder = transport.pusher(service.data_endpoint)
    honest = transport.pusher(service.data_endpoint)
    learner = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=5.0)
    frames = _garbage(random.Random(0), FLOOD)
    try:
        learner.connect()
        honest_g, after_g = granted(transport, service.control_endpoint, 2)

        def flood() -> None:
            for f in frames:
                assert flooder.send(f, timeout_ms=5000)

        thread = threading.Thread(target=flood)
        thread.start()
        for rec in group_records(honest_g, [0.0, 1.0]):  # while the flood is on
            assert honest.send([m.encode(rec)], timeout_ms=5000)
        batch = learner.sample(1, learner_version=0, timeout_s=10.0)
        # served during the flood: the group itself (a wait run out would be "not ready"), and
        # at the first request (no reply ran past the client's timeout and was retried)
        assert [g.group_id for g in batch.groups] == [honest_g] and learner.timeouts == 0
        thread.join(30)
        # Every garbage frame arrives (PUSH never drops) and is counted once, as malformed.
        wait_for(lambda: service.metrics().drops.get("malformed", 0) == FLOOD, 20, "flood counted")
        # A frame over the size limit: libzmq disconnects its sender before buffering it.
        big = transport.pusher(service.data_endpoint)
        big.send([b"\x00" * (2 * MAX_FRAME)], timeout_ms=1000)
        for rec in group_records(after_g, [0.0, 1.0]):
            assert honest.send([m.encode(rec)], timeout_ms=5000)
        batch = learner.sample(1, learner_version=0, timeout_s=10.0)
        assert [g.group_id for g in batch.groups] == [after_g]
        big.close()
        stats = learner.stats()
        assert stats.drops["malformed"] == FLOOD and stats.accepted_groups == 2
    finally:
        for s in (flooder, honest, learner):
            s.close()
        service.stop()
        transport.close()


def test_control_socket_counts_a_flood_and_answers_an_honest_peer() -> None:
    transport = ZmqTransport()
    service = buffer_service(transport, start=True, max_frame_bytes=MAX_FRAME)
    n = 5_000
    frames = [f for f in _garbage(random.Random(1), n)]
    flooder = transport.client(service.control_endpoint)
    sock = flooder._sock  # raw DEALER: fire requests without waiting for replies
    honest = BufferClient(transport, service.control_endpoint, "actor", "a0", timeout_s=30.0)
    try:
        for f in frames:
            sock.send_multipart(f)
        # The flood is queued in front of it; the honest peer is answered within its timeout:
        # each request at its first try (none ran past it and was sent again).
        assert honest.connect().ok
        assert honest.request_credits(1).groups == 1
        assert honest.timeouts == 0
        # Each garbage request is counted: malformed (bad bytes, wrong frame count, a weights
        # header) or unexpected (a valid Hello with another schema is answered, not counted).
        wrong_schema = sum(1 for f in frames if len(f) == 1 and f[0].startswith(b"\x94\xa5hello"))

        def counted() -> int:
            return service.metrics().drops.get("malformed", 0)

        wait_for(lambda: counted() == n - wrong_schema, 20, "flood counted")
        replies = 0
        while sock.poll(200):
            reply = m.decode_control(sock.recv_multipart()[0])
            assert isinstance(reply, m.ErrorReply | m.HelloAck)
            if isinstance(reply, m.HelloAck):
                assert not reply.ok and "schema" in reply.reason
            replies += 1
        undeliverable = service.metrics().drops.get("reply_undeliverable", 0)
        assert replies + undeliverable == n  # answered, or dropped when its queue was full
        # An oversized request disconnects its sender; the honest peer goes on.
        big = transport.client(service.control_endpoint)
        assert big.request([b"\x00" * (2 * MAX_FRAME)], timeout_ms=300) is None
        big.close()
        assert honest.stats().drops["malformed"] == n - wrong_schema
    finally:
        honest.close()
        flooder.close()
        service.stop()
        transport.close()


def test_weight_subscriber_counts_garbage_and_takes_the_next_good_version() -> None:
    transport = ZmqTransport()
    sender = ZmqWeightSender(transport)
    raw = sender._pub  # the PUB socket itself: this "learner" also sends garbage
    receiver = WeightSubscriber(transport, sender.endpoint)
    weights = {"w": torch.arange(6, dtype=torch.float32)}
    rng = random.Random(2)
    try:
        wait_for(lambda: sender.publish(1, weights) is not None and receiver.poll(50)
                 is not None, 10, "subscription")
        header = m.encode(m.WeightsHeader(m.SCHEMA_VERSION, 2, [
            m.TensorMeta("w", "float32", [6], 24)], 0.0))
        stale = m.encode(m.WeightsHeader(m.SCHEMA_VERSION + 1, 3, [], 0.0))
        kinds = [
            lambda: [rng.randbytes(rng.randint(0, 40))],
            lambda: [header[: rng.randint(0, len(header) - 1)]],
            lambda: [header, b"\x00" * 7],  # 7 bytes for a 24-byte tensor
            lambda: [header],  # tensor frame missing
            lambda: [stale],  # another schema version
            lambda: [m.encode(m.StatsRequest())],  # not a weights header at all
        ]
        assert receiver.poll(300) is None  # drains the subscription loop's extra version 1s
        sent = 0
        for _ in range(20):
            for _ in range(100):
                time.sleep(0.002)  # libzmq applies the reader's "pipe has room" at most ~1/ms
                raw.publish(rng.choice(kinds)())
                sent += 1
                # One at a time: the weights PUB keeps 1 message per subscriber (SNDHWM 1,
                # transport.py) and drops what comes while one waits; nothing may be dropped.
                deadline = time.monotonic() + 10
                while receiver.rejected < sent:
                    assert receiver.poll(50) is None and time.monotonic() < deadline, sent
            time.sleep(0.002)
            sender.publish(2 + sent, weights)
            wait_for(lambda: receiver.poll(100) is not None or False, 10, "good version")
        assert receiver.rejected == sent and receiver.version == 2 + sent
    finally:
        receiver.close()
        sender.close()
        transport.close()

"""Hostile frames through each socket's real decode + dispatch path, in-process, property-based.

Three sockets take frames from other processes: the buffer's data PULL (`_drain_data`: decode
-> unpack a DataBatch -> validate -> ingest each record), the buffer's control ROUTER (`_handle`:
decode -> dispatch -> reply), and the actor's weight SUB (`WeightSubscriber.poll`: decode ->
validate -> tensors). Each gets 10,000 hypothesis cases: random bytes, valid frames (data
Batches of hostile records too) truncated / flipped / extended, valid msgpack of the wrong
shape, messages of another family, valid structs with hostile values (NaN, huge, negative,
wrong schema version) and multipart messages of the wrong length. Each case must be rejected
and counted (or accepted, when it is a valid message), never raise, and the component must go
on serving an honest peer afterwards. The real-socket versions (floods, size limit) are in
tests/integration/test_hostile_sockets.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.inproc import InProcTransport
from tests.fakes.hostile import control_frames, data_frames, weights_messages
from tests.fakes.records import group_records
from tests.fakes.services import buffer_service

CASES = 10_000
PROPERTY = settings(
    max_examples=CASES, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REFUSALS = ("malformed", "unexpected_message", "invalid_request")


def _service(**buffer: Any) -> tuple[BufferService, InProcTransport]:
    """The real service, not started: each case goes through the loop's own parts."""
    transport = InProcTransport()
    return buffer_service(transport, **buffer), transport


def _stored_steps_are_sane(service: BufferService) -> None:
    """Whatever got stored is trainable: whole episodes, matching lengths, finite numbers."""
    for entry in service.buffer.store.entries():
        for ep in entry.group.episodes:
            assert [s.step_index for s in ep.steps] == list(range(ep.end.num_steps))
            assert math.isfinite(ep.end.outcome_reward)
            for s in ep.steps:
                assert len(s.behavior_logprobs) == len(s.action_ids)
                assert all(math.isfinite(x) for x in s.behavior_logprobs)
                assert math.isfinite(s.process_reward)


def _gid(service: BufferService) -> str:
    """A group id the service granted (records of other groups are refused: `ungranted`)."""
    return service.buffer.grant("a0", 1).group_ids[0]


def _honest_group_is_served(service: BufferService, pusher) -> None:
    group_id = _gid(service)
    for rec in group_records(group_id, [0.0, 1.0]):
        assert pusher.send([m.encode(rec)])
    service._drain_data()
    everything = len(service.buffer.store)
    reply = service._handle(b"learner", [m.encode(m.SampleRequest(everything, 0, 0.0))])
    assert isinstance(reply, m.SampleBatch) and reply.ready, reply
    assert group_id in {g.group_id for g in reply.groups}


@pytest.mark.slow
def test_data_socket_rejects_and_counts_hostile_frames() -> None:
    service, transport = _service()
    pusher = transport.pusher(service.data_endpoint)
    buf = service.buffer
    seen = {"frames": 0, "batches": 0}

    @PROPERTY
    @given(frames=data_frames())
    def feed(frames: list[bytes]) -> None:
        try:
            items = len(m.unpack_data(frames))  # a plain message is 1, a DataBatch its items
        except m.WireError:
            items = 1  # one malformed drop, whatever it holds
        seen["batches"] += items > 1  # only a decoded DataBatch holds more than one
        before = buf.records + buf.drops["malformed"]
        assert pusher.send(frames)
        service._drain_data()  # the loop's own path: recv -> unpack -> validate -> ingest
        # Each message is either decoded (each record then judged by the buffer) or counted
        # malformed once.
        assert buf.records + buf.drops["malformed"] == before + items
        seen["frames"] += 1

    try:
        feed()
        assert seen["frames"] >= CASES and seen["batches"] > CASES // 100
        assert buf.drops["malformed"] > CASES // 4 and buf.drops["invalid_record"] > 0
        buf.tick()
        _stored_steps_are_sane(service)
        _honest_group_is_served(service, pusher)
    finally:
        service.stop()


def test_control_socket_answers_every_hostile_request_and_counts_it() -> None:
    service, transport = _service()
    buf = service.buffer
    parked_max = {"n": 0}

    @PROPERTY
    @given(frames=control_frames())
    def feed(frames: list[bytes]) -> None:
        refused = sum(buf.drops[k] for k in REFUSALS)
        reply = service._handle(b"peer", frames)  # decode -> dispatch, as _drain_control does
        if reply is None:  # a SampleRequest parked until its (bounded, finite) deadline
            assert service._parked and math.isfinite(service._parked[-1].deadline)
        else:
            again = m.decode_control(m.encode(reply))  # every reply is a valid frame
            assert type(again) is type(reply)
            # A refusal is an ErrorReply and is counted under exactly one reason.
            counted = sum(buf.drops[k] for k in REFUSALS) - refused
            assert counted == int(isinstance(reply, m.ErrorReply)), (reply, counted)
        service._wait_ms()  # the loop's wait computation must survive any parked deadline
        service._serve_parked(service._clock())
        parked_max["n"] = max(parked_max["n"], len(service._parked))
        service.buffer.set_version(0)  # VersionUpdate cases move it; keep the honest check valid

    try:
        feed()
        assert buf.drops["malformed"] > CASES // 4 and buf.drops["unexpected_message"] > 0
        assert buf.drops["invalid_request"] > 0
        # One peer identity never holds more than one parked request (a DEALER asks one at a time).
        assert parked_max["n"] <= 1
        ack = service._handle(b"honest", [m.encode(m.Hello(m.SCHEMA_VERSION, "actor", "a0"))])
        assert isinstance(ack, m.HelloAck) and ack.ok
        stale = service._handle(b"old", [m.encode(m.Hello(m.SCHEMA_VERSION + 1, "actor", "a1"))])
        assert isinstance(stale, m.HelloAck) and not stale.ok and "schema" in stale.reason
        service._parked.clear()
        buf.admission.release_all()  # the flood's CreditRequests' credits (as if expired)
        _honest_group_is_served(service, transport.pusher(service.data_endpoint))
    finally:
        service.stop()


@pytest.mark.slow
def test_weight_socket_rejects_and_counts_hostile_messages() -> None:
    transport = InProcTransport()
    pub = ZmqWeightSender(transport)
    raw = transport.hub.subscribers[pub.endpoint]  # the PUB socket's fan-out queues
    receiver = WeightSubscriber(transport, pub.endpoint)
    counts = {"sent": 0}

    @PROPERTY
    @given(frames=weights_messages())
    def feed(frames: list[bytes]) -> None:
        before = receiver.rejected + receiver.received
        for q in raw:
            q.put(list(frames))
        got = receiver.poll(0)  # decode -> validate -> owned tensors; never raises
        assert receiver.rejected + receiver.received == before + 1
        if got is not None:
            header, tensors = got
            assert header.schema_version == m.SCHEMA_VERSION
            for meta in header.tensors:  # what comes out matches what the header promised
                t = tensors[meta.name]
                assert list(t.shape) == meta.shape and t.numel() * t.element_size() == meta.nbytes
        counts["sent"] += 1

    try:
        feed()
        assert counts["sent"] >= CASES and receiver.rejected > CASES // 2
        # An honest version newer than anything accepted so far still gets through.
        # Mangled headers can decode to valid ones with any version (an unauthenticated SUB
        # accepts them: that is what curve is for), so go above what was accepted.
        newest = max(10_000, receiver.version + 1)
        weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
        pub.publish(newest, weights)
        got = receiver.poll(1000)
        assert got is not None, (receiver.version, receiver.rejected, receiver.last_error)
        assert got[0].version == newest
        assert torch.equal(got[1]["w"], weights["w"])
    finally:
        receiver.close()
        pub.close()


def test_token_ids_outside_the_vocabulary_are_refused_and_counted() -> None:
    """An id the learner's embedding lacks (or a negative one) would crash its lookup."""
    service, transport = _service(bounds=RecordBounds(vocab_size=1000, max_group_size=2))
    pusher = transport.pusher(service.data_endpoint)
    try:
        too_big = group_records(_gid(service), [0.0, 1.0])
        too_big[0] = msgspec.structs.replace(too_big[0], action_ids=m.TokenIds([5, 1000, 7]))
        negative = group_records(_gid(service), [0.0, 1.0])
        negative[0] = msgspec.structs.replace(negative[0], context_ids=m.TokenIds([-1, 2]))
        edge_g = _gid(service)
        edge = group_records(edge_g, [0.0, 1.0])  # 0 and vocab_size - 1 are valid ids
        edge[0] = msgspec.structs.replace(edge[0], context_ids=m.TokenIds([0, 999]))
        for rec in too_big + negative + edge:
            assert pusher.send([m.encode(rec)])
        service._drain_data()
        service.buffer.tick()
        assert service.buffer.drops["invalid_record"] == 2
        stored = {e.group.group_id for e in service.buffer.store.entries()}
        assert stored == {edge_g}
        _stored_steps_are_sane(service)
    finally:
        service.stop()


def test_a_whole_group_with_nan_numbers_is_refused_and_counted() -> None:
    """Regression: an EpisodeEnd with outcome_reward NaN reached the sum tree, whose
    ValueError stopped the service loop (one valid-msgpack frame killed the buffer)."""
    service, transport = _service()
    pusher = transport.pusher(service.data_endpoint)
    try:
        nan_reward = group_records(_gid(service), [math.nan, 1.0])
        nan_logprob = group_records(_gid(service), [0.0, 1.0])
        nan_logprob[0] = msgspec.structs.replace(nan_logprob[0], behavior_logprobs=[math.nan] * 3)
        inf_process = group_records(_gid(service), [0.0, 1.0])
        inf_process[1] = msgspec.structs.replace(inf_process[1], process_reward=math.inf)
        for rec in nan_reward + nan_logprob + inf_process:
            assert pusher.send([m.encode(rec)])
        service._drain_data()
        service.buffer.tick()
        assert service.buffer.drops["invalid_record"] == 3
        assert len(service.buffer.store) == 0 and service.buffer.drops["ingest_error"] == 0
        _stored_steps_are_sane(service)
        _honest_group_is_served(service, pusher)
    finally:
        service.stop()


@pytest.mark.parametrize("timeout_s", [math.inf, math.nan, -1.0, 1e308])
def test_a_sample_request_cannot_park_forever(timeout_s: float) -> None:
    """Regression: SampleRequest(timeout_s=inf) made `_wait_ms` raise OverflowError, which
    stopped the service loop; now a non-finite wait is refused and a huge one is capped."""
    service, _ = _service()
    try:
        reply = service._handle(b"p", [m.encode(m.SampleRequest(1, 0, timeout_s))])
        if timeout_s == 1e308:
            assert reply is None and service._parked[0].deadline <= service._clock() + 3600
        else:
            assert isinstance(reply, m.ErrorReply) and "finite timeout_s" in reply.reason
            assert service.buffer.drops["invalid_request"] == 1
        assert 0 <= service._wait_ms() <= 50
    finally:
        service.stop()


def test_a_weights_header_listing_a_tensor_twice_is_rejected() -> None:
    """Regression: two tensors named "w" decoded into one dict entry (the last one won)."""
    from agent_r1_async.weights.zmq import decode_weights

    metas = [m.TensorMeta("w", "float32", [1], 4), m.TensorMeta("w", "float32", [2], 8)]
    header = m.encode(m.WeightsHeader(m.SCHEMA_VERSION, 3, metas, 0.0))
    with pytest.raises(m.WireError, match="listed twice"):
        decode_weights([header, bytes(4), bytes(8)])


def test_a_wrong_schema_weights_header_is_rejected() -> None:
    header = m.WeightsHeader(m.SCHEMA_VERSION + 1, 5, [], 0.0)
    with pytest.raises(m.WireError, match="schema version"):
        m.decode_weights_header(m.encode(header))


# Socket-facing modules must never unpickle: no pickle / cloudpickle / marshal / shelve use,
# and torch.load only with weights_only=True (checkpoints on disk, never socket data).
_UNSAFE = re.compile(r"\b(c?pickle|cloudpickle|dill|marshal|shelve)\b|pickle\.loads?|\.recv_pyobj")


def test_nothing_in_the_package_unpickles() -> None:
    root = Path(__file__).resolve().parents[3] / "agent_r1_async"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _UNSAFE.search(code) and "nothing on any socket is ever unpickled" not in line:
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
            if "torch.load(" in code and "weights_only=True" not in code:
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert offenders == []

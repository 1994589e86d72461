"""DataBatch frames: encoding, decoded memory ownership, and the buffer service's ingestion."""

from __future__ import annotations

import msgspec
import pytest

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.inproc import InProcTransport
from agent_r1_async.wire.transport import Pusher
from tests.fakes.clock import FakeClock
from tests.fakes.records import episode_records, group_records, step
from tests.fakes.services import buffer_service


def _service() -> tuple[BufferService, Pusher]:
    """The real service, not started (the test drives `_drain_data`), and a pusher to it."""
    transport = InProcTransport()
    service = buffer_service(transport, clock=FakeClock())
    return service, transport.pusher(service.data_endpoint)


def test_encode_data_batch_is_the_data_batch_of_the_decoded_items():
    items = episode_records("e0", "g0", num_steps=2)
    frame = m.encode_data_batch([m.encode(x) for x in items])
    assert frame == m.encode(m.DataBatch(items))
    assert m.decode_data(frame) == m.DataBatch(items)
    assert list(m.unpack_data([frame])) == items
    assert list(m.unpack_data([m.encode(items[0])])) == [items[0]]  # a plain message


@pytest.mark.parametrize("frames", [
    # wrong type
    [m.encode_data_batch([m.encode(step("e0", "g0", 0)), m.encode(m.VersionUpdate(1))])],
    [m.encode(m.DataBatch([m.DataBatch([step("e0", "g0", 0)])]))],  # nested
    [m.encode(m.DataBatch([]))],  # empty
    [m.encode_data_batch([m.encode(step("e0", "g0", 0)), b"\xc1"])],  # an item that is not msgpack
    [m.encode(step("e0", "g0", 0)), m.encode(step("e0", "g0", 1))],  # multipart
])
def test_a_bad_message_is_one_malformed_drop_and_nothing_of_it_is_ingested(frames):
    with pytest.raises(m.WireError):
        m.unpack_data(frames)
    service, pusher = _service()
    try:
        assert pusher.send(frames)
        service._drain_data()
        buf = service.buffer
        assert (buf.drops["malformed"], buf.records, buf.assembler.groups_assembling) == (1, 0, 0)
    finally:
        service.stop()


def test_a_batch_is_ingested_exactly_like_its_items_sent_one_by_one():
    one_by_one, pusher_a = _service()
    batched, pusher_b = _service()
    try:
        def feed(records: list) -> None:  # one frame each to A, one DataBatch frame to B
            for rec in records:
                assert pusher_a.send([m.encode(rec)])
            assert pusher_b.send([m.encode_data_batch([m.encode(r) for r in records])])
            one_by_one._drain_data()
            batched._drain_data()

        # The same granted group id in both (records of groups never granted are refused).
        batched.buffer.admission._prefix = one_by_one.buffer.admission._prefix
        [g0] = one_by_one.buffer.grant("a0", 1).group_ids
        assert batched.buffer.grant("a0", 1).group_ids == [g0]
        feed(episode_records(f"{g0}-e0", g0, num_steps=2))  # 2 StepRecords + EpisodeEnd
        # One episode of a 2-episode group: 3 records in, the group still assembling.
        for service in (one_by_one, batched):
            buf = service.buffer
            assert (buf.records, buf.assembler.groups_assembling, len(buf.store)) == (3, 1, 0)
        assert batched.buffer.state() == one_by_one.buffer.state()
        feed(episode_records(f"{g0}-e1", g0, num_steps=2))
        for service in (one_by_one, batched):
            buf = service.buffer
            assert (buf.records, buf.assembler.groups_assembling, len(buf.store)) == (6, 0, 1)
            assert sum(buf.drops.values()) == 0
        assert batched.buffer.state() == one_by_one.buffer.state()
    finally:
        one_by_one.stop()
        batched.stop()


def test_a_bad_item_the_buffer_refuses_is_counted_per_item():
    service, pusher = _service()
    try:
        [g0] = service.buffer.grant("a0", 1).group_ids
        good = step("e0", g0, 0)
        bad = msgspec.structs.replace(step("e0", g0, 1), behavior_logprobs=[-0.5])  # 3 actions
        assert pusher.send([m.encode_data_batch([m.encode(good), m.encode(bad), m.encode(good)])])
        service._drain_data()
        buf = service.buffer
        # Decoded fine: three records judged one by one; the mismatched one is invalid.
        assert (buf.records, buf.drops["invalid_record"], buf.drops["malformed"]) == (3, 1, 0)
    finally:
        service.stop()


def test_an_item_whose_ingest_raises_is_one_ingest_error_and_the_rest_go_on(monkeypatch):
    service, pusher = _service()
    ingest = service.buffer.ingest

    def flaky(msg, sender=None) -> None:
        if isinstance(msg, m.StepRecord) and msg.step_index == 1:
            raise KeyError("unforeseen")
        ingest(msg, sender)

    monkeypatch.setattr(service.buffer, "ingest", flaky)
    try:
        recs = episode_records("g0-e0", "g0", num_steps=3)  # steps 0, 1, 2 and the end
        assert pusher.send([m.encode_data_batch([m.encode(r) for r in recs])])
        service._drain_data()
        buf = service.buffer
        assert (buf.drops["ingest_error"], buf.records, buf.drops["malformed"]) == (1, 3, 0)
    finally:
        service.stop()


def test_decoded_values_own_their_memory():
    rec = step("e0", "g0", 0, n_actions=5)
    rec = msgspec.structs.replace(rec, token_versions=[0, 1], finish_reason="length")
    end = m.EpisodeEnd("e0", "g0", "t", "a0", "fake", 1, 1.0, "ok", 2, metrics={"em": 1.0})
    buf = bytearray(m.encode_data_batch([m.encode(rec), m.encode(end)]))
    view = memoryview(buf)
    got = list(m.unpack_data([view]))
    view.release()  # raises BufferError if a decoded value still exported the buffer
    buf[:] = bytes(len(buf))  # overwrite the received bytes
    assert got == [rec, end]
    assert type(got[0].context_ids) is m.TokenIds and type(got[0].behavior_logprobs) is m.LogProbs


def test_the_service_reports_records_per_frame_as_launch_metrics_log_it():
    from agent_r1_async.run.output.metric_names import merge_metrics
    from agent_r1_async.run.processes.buffer_group import struct_to_dict

    service, pusher = _service()
    try:
        assert service.metrics().records_per_frame == 0.0  # no frame yet
        records = episode_records("g0-e0", "g0", num_steps=2)  # 2 StepRecords + EpisodeEnd
        assert pusher.send([m.encode_data_batch([m.encode(r) for r in records])])  # 3 in one frame
        assert pusher.send([m.encode(step("g0-e1", "g0", 0))])  # 1 alone
        service._drain_data()
        stats = service.metrics()
        assert stats.records_per_frame == 2.0  # (3 + 1) / 2 frames
        out, _ = merge_metrics({"metrics": {}}, struct_to_dict(stats))  # as launch logs it
        assert out["buffer/records_per_frame"] == 2.0
    finally:
        service.stop()


def test_a_sample_request_asking_for_failed_episodes_gets_them_with_its_batch():
    service, pusher = _service()
    first, second, bad = service.buffer.grant("a0", 3).group_ids
    for rec in [*episode_records("bad-e0", bad, status="engine_error"),
                *group_records(first, [1.0, 0.0]), *group_records(second, [0.0, 1.0])]:
        assert pusher.send([m.encode(rec)])
    service._drain_data()
    plain = service._handle(b"learner", [m.encode(m.SampleRequest(1, 0, 0.0))])
    assert isinstance(plain, m.SampleBatch) and plain.ready and plain.failed == []
    asked = service._handle(b"learner", [m.encode(m.SampleRequest(1, 0, 0.0, 10**9))])
    assert isinstance(asked, m.SampleBatch) and asked.ready, asked
    assert [e.end.episode_id for e in asked.failed] == ["bad-e0"]  # all it has, however many
    assert asked.failed[0].end.status == "engine_error" and len(asked.failed[0].steps) == 2
    assert service.buffer.take_failed(1) == []  # handed out once

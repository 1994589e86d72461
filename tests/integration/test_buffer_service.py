"""Buffer service over real ZeroMQ (tcp loopback): records in, batches out, garbage counted,
snapshot and restore by ids."""

from __future__ import annotations

import time

import pytest

from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.records import episode_records, group_records
from tests.fakes.services import buffer_service, granted, push_records, wait_for

ALGO = AlgorithmConfig(group_size=2, batch_groups=2)


@pytest.fixture
def transport():
    t = ZmqTransport()
    yield t
    t.close()


def test_records_in_batches_out_and_garbage_is_counted(transport) -> None:
    service = buffer_service(transport, algo=ALGO, max_reuse=1)
    service.start()
    actor = BufferClient(transport, service.control_endpoint, "actor", "a0", timeout_s=5.0)
    learner = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=5.0)
    raw = transport.client(service.control_endpoint)
    try:
        assert actor.connect().ok and learner.connect().ok
        grant = actor.request_credits(2)
        assert grant.groups == 2 and len(grant.group_ids) == 2
        # Garbage on the data socket: bad bytes, a valid control message, two frames.
        garbage = transport.pusher(service.data_endpoint)
        try:
            garbage.send([b"\xc1 not msgpack"])
            garbage.send([m.encode(m.StatsRequest())])
            garbage.send([m.encode(m.StatsRequest()), b"x"])
        finally:
            garbage.close()
        # Garbage on the control socket: bad bytes and a reply type sent as a request.
        for frames in ([b"\xff\xfe"], [m.encode(m.VersionAck(3))]):
            reply = m.decode_control(raw.request(frames, timeout_ms=5000)[0])
            assert isinstance(reply, m.ErrorReply)
        # Honest data: two groups of two episodes each, with the granted ids.
        records = [r for gid in grant.group_ids for r in group_records(gid, [0.0, 1.0])]
        push_records(transport, service.data_endpoint, records)
        batch = learner.sample(2, learner_version=0, timeout_s=5.0)  # parked until ready
        assert batch.ready and sorted(g.group_id for g in batch.groups) == sorted(grant.group_ids)
        assert len(batch.is_weights) == 2 and max(batch.is_weights) == 1.0
        learner.set_version(1)
        wait_for(lambda: service.metrics().drops.get("malformed", 0) >= 4)  # other connection
        stats = learner.stats()
        assert stats.learner_version == 1 and stats.sampled_groups == 2
        assert stats.accepted_groups == 2 and stats.in_flight_groups == 0
        # 3 data frames + 1 bad control frame are malformed; the reply-type request is not.
        assert stats.drops["malformed"] == 4 and stats.drops["unexpected_message"] == 1
        # Two steps of 3 action tokens per episode, 4 episodes, all at staleness 0.
        assert stats.staleness_hist == {0: 24}
        # Nothing left: a sample with a short wait answers "not ready" instead of hanging.
        t0 = time.monotonic()
        empty = learner.sample(2, learner_version=1, timeout_s=0.3)
        assert not empty.ready and empty.groups == [] and time.monotonic() - t0 >= 0.25
    finally:
        actor.close()
        learner.close()
        raw.close()
        service.stop()


def test_schema_mismatch_is_refused(transport) -> None:
    service = buffer_service(transport, algo=ALGO)
    service.start()
    raw = transport.client(service.control_endpoint)
    try:
        hello = m.Hello(schema_version=m.SCHEMA_VERSION + 1, role="actor", peer_id="old")
        ack = m.decode_control(raw.request([m.encode(hello)], timeout_ms=5000)[0])
        assert isinstance(ack, m.HelloAck) and not ack.ok and "schema" in ack.reason
    finally:
        raw.close()
        service.stop()


def test_snapshot_restore_keeps_every_accepted_episode(transport, tmp_path) -> None:
    snap = str(tmp_path / "snap")
    first = buffer_service(transport, algo=ALGO, snapshot_dir=snap, max_reuse=1)
    first.start()
    try:
        # Three complete groups, and one group with one episode ended and one mid-way.
        g0, g1, g2, g3 = gids = granted(transport, first.control_endpoint, 4)
        records = [r for gid in (g0, g1, g2) for r in group_records(gid, [0.0, 1.0])]
        records += episode_records(f"{g3}-e0", g3, group_size=2)
        records += episode_records(f"{g3}-e1", g3, group_size=2)[:1]
        push_records(transport, first.data_endpoint, records)
        wait_for(lambda: first.metrics().groups_ready == 3)
    finally:
        first.stop()  # writes the snapshot
    assert first.metrics().groups_assembling == 1

    second = buffer_service(transport, algo=ALGO, snapshot_dir=snap, max_reuse=1)
    second.start()
    learner = BufferClient(transport, second.control_endpoint, "learner", "L", timeout_s=5.0)
    try:
        assert second.restored
        stats = learner.stats()
        assert (stats.groups_ready, stats.groups_assembling, stats.accepted_groups) == (3, 1, 3)
        # The half-done episode resumes where it stopped: its last step and end arrive now.
        push_records(transport, second.data_endpoint,
                     episode_records(f"{g3}-e1", g3, group_size=2)[1:])
        batch = learner.sample(4, learner_version=0, timeout_s=5.0)
        assert batch.ready
        assert sorted(g.group_id for g in batch.groups) == sorted(gids)
        episode_ids = sorted(e.end.episode_id for g in batch.groups for e in g.episodes)
        expected = sorted(f"{g}-e{j}" for g in gids for j in range(2))
        assert episode_ids == expected
        steps = {
            e.end.episode_id: [s.step_index for s in e.steps]
            for g in batch.groups
            for e in g.episodes
        }
        assert steps[f"{g3}-e1"] == [0, 1]
    finally:
        learner.close()
        second.stop()


def test_periodic_snapshot_and_in_process_transport(tmp_path) -> None:
    from agent_r1_async.wire.inproc import InProcTransport

    snap = tmp_path / "snap"
    transport = InProcTransport()
    service = buffer_service(transport, algo=ALGO, snapshot_dir=str(snap),
                             snapshot_interval_s=0.05)
    service.start()
    learner = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=5.0)
    try:
        learner.connect()
        [g0] = granted(transport, service.control_endpoint, 1)
        push_records(transport, service.data_endpoint, group_records(g0, [0.0, 1.0]))
        wait_for(lambda: service.metrics().groups_ready == 1)
        wait_for((snap / "buffer.snapshot").exists)
        first = (snap / "buffer.snapshot").stat().st_mtime_ns
        wait_for(lambda: (snap / "buffer.snapshot").stat().st_mtime_ns != first)  # rewritten
        batch = learner.sample(1, learner_version=0, timeout_s=1.0)
        assert [g.group_id for g in batch.groups] == [g0]
    finally:
        learner.close()
        service.stop()


def test_an_unreadable_snapshot_is_named_and_the_buffer_starts_empty(transport, tmp_path) -> None:
    (tmp_path / "buffer.snapshot").write_bytes(b"\x00 not a snapshot")
    service = buffer_service(transport, algo=ALGO, snapshot_dir=str(tmp_path))
    try:
        assert not service.restored and service.metrics().groups_ready == 0
        assert service.snapshot_report is not None
        assert service.snapshot_report.line() == (
            f"buffer: snapshot {tmp_path}/buffer.snapshot is corrupt (does not decode: "
            "ValidationError: Expected `array`, got `int`); no intact snapshot: the buffer "
            "starts empty")
    finally:
        service.stop()

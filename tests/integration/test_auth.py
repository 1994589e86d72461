"""Authentication and roles at the service level, over real ZeroMQ with a run's own keys.

`launch` generates `RunKeys` (wire/curve.py: one server key pair, one client key pair for the
learner and one per actor) and hands each process its own (`for_process`). Here the real
`BufferService`, `BufferClient`s and `ZmqWeightSender`/`WeightSubscriber` run with such keys.
Peers without a run key (a stranger with its own key pair who even knows the server's public
key, and a plain unencrypted peer) are refused during the CurveZMQ handshake: the service never
sees a frame of theirs. Peers with a key get only their role (wire/roles.py): an actor cannot
move the learner's version, sample, take another actor's credits or speak for it.
`tests/integration/test_launch_auth.py` checks that `launch` wires these keys itself.
"""

from __future__ import annotations

import time

import pytest
import torch

from agent_r1_async.config import LaunchConfig
from agent_r1_async.weights.zmq import WeightSubscriber, ZmqWeightSender
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.curve import CurveKeys, RunKeys
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.records import group_records, step
from tests.fakes.services import buffer_service, push_records, wait_for

WEIGHTS = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}


@pytest.fixture
def run():
    """The run's transports by identity ("buffer" binds; "learner", "actor-0", "actor-1"
    connect) and two transports without a run key ("stranger", "plain")."""
    keys = RunKeys.generate(["learner", "actor-0", "actor-1"])
    other = CurveKeys.generate()
    t = {
        "buffer": ZmqTransport(curve=keys.for_process(None, binds=True)),
        "learner": ZmqTransport(curve=keys.for_process("learner", binds=True)),
        "actor-0": ZmqTransport(curve=keys.for_process("actor-0", binds=False)),
        "actor-1": ZmqTransport(curve=keys.for_process("actor-1", binds=False)),
        # Knows the servers' public key (it is not secret) but has its own client key pair.
        "stranger": ZmqTransport(curve=CurveKeys(keys.server_public, b"", other.client_public,
                                                 other.client_secret)),
        "plain": ZmqTransport(),
    }
    yield keys, t
    for x in t.values():
        x.close()


def test_sockets_bind_to_loopback_and_authenticate_by_default() -> None:
    transport = ZmqTransport()
    service = buffer_service(transport)
    sender = ZmqWeightSender(transport)
    try:
        for endpoint in (service.data_endpoint, service.control_endpoint, sender.endpoint):
            assert endpoint.startswith("tcp://127.0.0.1:"), endpoint
        assert LaunchConfig().bind_host == "127.0.0.1" and LaunchConfig().curve
        assert tcp_endpoint().startswith("tcp://127.0.0.1:")
    finally:
        sender.close()
        service.stop()
        transport.close()


def test_a_peer_without_the_key_cannot_inject_records(run) -> None:
    _, t = run
    service = buffer_service(t["buffer"], start=True)
    try:
        for name in ("stranger", "plain"):
            pusher = t[name].pusher(service.data_endpoint)
            for rec in group_records(f"evil-{name}", [0.0, 1.0]):
                pusher.send([m.encode(rec)], timeout_ms=200)  # queued locally, never delivered
            client = BufferClient(t[name], service.control_endpoint, "learner", f"evil-{name}",
                                  timeout_s=0.5, retries=0)
            with pytest.raises(ConnectionError):  # no Hello ever reaches the service
                client.connect()
            client.close()
            pusher.close()
        time.sleep(0.5)
        with service._lock:
            assert service.buffer.records == 0  # not one intruder frame was even decoded
        # The run's own actor and learner are served as usual.
        learner = BufferClient(t["learner"], service.control_endpoint, "learner", "learner")
        actor = BufferClient(t["actor-0"], service.control_endpoint, "actor", "actor-0")
        try:
            assert learner.connect().ok and actor.connect().ok
            [gid] = actor.request_credits(1).group_ids
            push_records(t["actor-0"], service.data_endpoint,
                         group_records(gid, [0.0, 1.0], actor_id="actor-0"))
            batch = learner.sample(1, learner_version=0, timeout_s=5.0)
            assert [g.group_id for g in batch.groups] == [gid]
            stats = learner.stats()
            assert stats.accepted_groups == 1 and stats.drops.get("malformed", 0) == 0
        finally:
            actor.close()
            learner.close()
    finally:
        service.stop()


def test_only_the_learner_moves_the_version_and_samples(run) -> None:
    """The drill: one VersionUpdate(10**9) froze a run for good, and a stranger's
    SampleRequest stole groups. Now only the learner's key may send either."""
    _, t = run
    service = buffer_service(t["buffer"], start=True)
    learner = BufferClient(t["learner"], service.control_endpoint, "learner", "learner")
    actor = BufferClient(t["actor-0"], service.control_endpoint, "actor", "actor-0")
    try:
        assert learner.connect().ok and actor.connect().ok
        with pytest.raises(RuntimeError, match="only the learner may send it"):
            actor.set_version(10**9)
        [gid] = actor.request_credits(1).group_ids
        push_records(t["actor-0"], service.data_endpoint,
                     group_records(gid, [0.0, 1.0], actor_id="actor-0"))
        wait_for(lambda: learner.stats().groups_ready == 1)
        with pytest.raises(RuntimeError, match="only the learner may send it"):
            actor.sample(1, learner_version=0, timeout_s=0.0)
        assert learner.stats().learner_version == 0  # not 10**9
        batch = learner.sample(1, learner_version=0, timeout_s=5.0)  # nothing was stolen
        assert [g.group_id for g in batch.groups] == [gid]
        learner.set_version(1)
        assert learner.stats().learner_version == 1
        # The learner's key is no actor's: no credits for it, and it cannot say it is one.
        with pytest.raises(RuntimeError, match="go to that actor only"):
            BufferClient(t["learner"], service.control_endpoint, "actor", "learner",
                         retries=0).request_credits(1)
        with pytest.raises(ConnectionError, match="not a actor's"):
            BufferClient(t["learner"], service.control_endpoint, "actor", "x",
                         retries=0).connect()
        drops = learner.stats().drops
        assert drops["unauthorized/VersionUpdate"] == 1
        assert drops["unauthorized/SampleRequest"] == 1
        assert drops["unauthorized/CreditRequest"] == 1 and drops["unauthorized/Hello"] == 1
    finally:
        actor.close()
        learner.close()
        service.stop()


def test_an_actor_cannot_take_or_fill_another_actors_credits(run) -> None:
    _, t = run
    service = buffer_service(t["buffer"], start=True)
    learner = BufferClient(t["learner"], service.control_endpoint, "learner", "learner")
    a0 = BufferClient(t["actor-0"], service.control_endpoint, "actor", "actor-0")
    a1_as_a0 = BufferClient(t["actor-1"], service.control_endpoint, "actor", "actor-0",
                            retries=0)
    try:
        with pytest.raises(RuntimeError, match="go to that actor only"):
            a1_as_a0.request_credits(1)
        [gid] = a0.request_credits(1).group_ids
        recs = group_records(gid, [0.0, 1.0], actor_id="actor-0")
        push_records(t["actor-1"], service.data_endpoint, recs)  # actor-1's key, actor-0's name
        push_records(t["actor-1"], service.data_endpoint,
                     [m.ActorStats("actor-0", 1.0, 0, 5e5, 1.0, 1.0, 1.0, 1, 1, 0)])
        wait_for(lambda: learner.stats().drops.get("invalid_record/identity", 0) == 6)
        stats = learner.stats()
        assert stats.drops["invalid_stats/identity"] == 1 and stats.actors == {}
        assert stats.groups_assembling == 0 and stats.in_flight_groups == 1
        push_records(t["actor-0"], service.data_endpoint, recs)  # the owner completes it
        assert [g.group_id for g in learner.sample(1, 0, timeout_s=5.0).groups] == [gid]
    finally:
        for c in (a1_as_a0, a0, learner):
            c.close()
        service.stop()


def test_without_curve_ungranted_records_still_take_no_credit() -> None:
    """`launch.curve: false`: any local process is trusted, but 4 StepRecords for groups
    nobody granted (which stalled a run for 10 minutes) are refused and counted."""
    transport = ZmqTransport()
    service = buffer_service(transport, start=True, max_staleness=3)  # 4 credits in all
    actor = BufferClient(transport, service.control_endpoint, "actor", "a0")
    try:
        push_records(transport, service.data_endpoint,
                     [step(f"x{i}-e0", f"x{i}", 0) for i in range(4)])
        wait_for(lambda: actor.stats().drops.get("invalid_record/ungranted", 0) == 4)
        grant = actor.request_credits(4)
        assert grant.groups == 4 and actor.stats().in_flight_groups == 4
    finally:
        actor.close()
        service.stop()
        transport.close()


def _poll_for(receiver: WeightSubscriber, sender: ZmqWeightSender, seconds: float):
    """Publish version 1 repeatedly (slow joiner) and poll; the received message or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sender.publish(1, WEIGHTS)
        got = receiver.poll(timeout_ms=50)
        if got is not None:
            return got
    return None


def test_a_peer_without_the_key_cannot_publish_or_read_weights(run) -> None:
    keys, t = run
    # A rogue sender that took over the weights endpoint: with its own server key pair (it
    # lacks the run's server secret) or with no encryption at all. An actor's own keys hold
    # no server secret: an actor cannot pose as the sender either.
    rogue_keys = CurveKeys.generate()
    rogues = {
        "own-server-key": ZmqTransport(curve=CurveKeys(
            keys.server_public, rogue_keys.server_secret, b"", b"",
            peers=keys.for_process(None, binds=True).peers)),
        "plain": ZmqTransport(),
    }
    with pytest.raises(ValueError, match="no server secret"):
        ZmqWeightSender(t["actor-0"])
    try:
        for name, rt in rogues.items():
            rogue = ZmqWeightSender(rt)
            receiver = WeightSubscriber(t["actor-0"], rogue.endpoint)
            try:
                assert _poll_for(receiver, rogue, 1.0) is None, name
                assert receiver.received == 0 and receiver.rejected == 0  # nothing got through
            finally:
                receiver.close()
                rogue.close()
        # The run's learner reaches the run's actor.
        sender = ZmqWeightSender(t["learner"])
        receiver = WeightSubscriber(t["actor-0"], sender.endpoint)
        try:
            got = _poll_for(receiver, sender, 10.0)
            assert got is not None and got[0].version == 1
            assert torch.equal(got[1]["w"], WEIGHTS["w"])
            # And an eavesdropper without a run key learns nothing from that sender.
            for name in ("stranger", "plain"):
                spy = WeightSubscriber(t[name], sender.endpoint)
                try:
                    assert _poll_for(spy, sender, 0.7) is None, name
                finally:
                    spy.close()
        finally:
            receiver.close()
            sender.close()
    finally:
        for rt in rogues.values():
            rt.close()

"""Authentication at the service level: loopback by default, CurveZMQ keys when configured.

With `launch.curve: true` (or when joining a cluster) `launch` generates one `CurveKeys` per
run and hands it to the processes through Ray. Here the real `BufferService` and
`WeightReceiver` run with such keys, and peers without them (a stranger with its own client
key pair who even knows the server's public key, and a plain unencrypted peer) try to inject
trajectories, talk to the control socket, publish weights and eavesdrop on weights. Every one
of them is refused during the CurveZMQ handshake: the service never sees a frame from them.
"""

from __future__ import annotations

import time

import pytest
import torch

from agent_r1_async.config import LaunchConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.weights import WeightPublisher, WeightReceiver
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport
from tests.fakes.records import group_records
from tests.fakes.services import buffer_service

WEIGHTS = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}


@pytest.fixture
def keys_and_peers():
    """The run's keys, the run's transports, and two transports without the run's keys."""
    keys = CurveKeys.generate()
    other = CurveKeys.generate()
    server = ZmqTransport(curve=keys)
    honest = ZmqTransport(curve=keys)
    # Knows the servers' public key (it is not secret) but has its own client key pair.
    stranger = ZmqTransport(curve=CurveKeys(keys.server_public, other.server_secret,
                                            other.client_public, other.client_secret))
    plain = ZmqTransport()
    yield keys, server, honest, {"stranger": stranger, "plain": plain}
    for t in (server, honest, stranger, plain):
        t.close()


def test_sockets_bind_to_loopback_by_default() -> None:
    transport = ZmqTransport()
    service = buffer_service(transport)
    publisher = WeightPublisher(transport)
    try:
        for endpoint in (service.data_endpoint, service.control_endpoint, publisher.endpoint):
            assert endpoint.startswith("tcp://127.0.0.1:"), endpoint
        assert LaunchConfig().bind_host == "127.0.0.1" and not LaunchConfig().curve
        assert tcp_endpoint().startswith("tcp://127.0.0.1:")
    finally:
        publisher.close()
        service.stop()
        transport.close()


def test_a_peer_without_the_key_cannot_inject_trajectories(keys_and_peers) -> None:
    _, server, honest, intruders = keys_and_peers
    service = buffer_service(server, start=True)
    try:
        for name, t in intruders.items():
            pusher = t.pusher(service.data_endpoint)
            for rec in group_records(f"evil-{name}", [0.0, 1.0]):
                pusher.send([m.encode(rec)], timeout_ms=200)  # queued locally, never delivered
            client = BufferClient(t, service.control_endpoint, "actor", f"evil-{name}",
                                  timeout_s=0.5, retries=0)
            with pytest.raises(ConnectionError):  # no Hello ever reaches the service
                client.connect()
            client.close()
            pusher.close()
        time.sleep(0.5)
        with service._lock:
            assert service.buffer.records == 0  # not one intruder frame was even decoded
        # The run's own actor and learner are served as usual.
        learner = BufferClient(honest, service.control_endpoint, "learner", "L", timeout_s=5.0)
        pusher = honest.pusher(service.data_endpoint)
        try:
            assert learner.connect().ok
            for rec in group_records("honest", [0.0, 1.0]):
                assert pusher.send([m.encode(rec)], timeout_ms=2000)
            batch = learner.sample(1, learner_version=0, timeout_s=5.0)
            assert [g.group_id for g in batch.groups] == ["honest"]
            stats = learner.stats()
            assert stats.accepted_groups == 1 and stats.drops.get("malformed", 0) == 0
        finally:
            pusher.close()
            learner.close()
    finally:
        service.stop()


def _poll_for(receiver: WeightReceiver, publisher: WeightPublisher, seconds: float):
    """Publish version 1 repeatedly (slow joiner) and poll; the received message or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        publisher.publish(1, WEIGHTS)
        got = receiver.poll(timeout_ms=50)
        if got is not None:
            return got
    return None


def test_a_peer_without_the_key_cannot_publish_weights(keys_and_peers) -> None:
    keys, server, honest, intruders = keys_and_peers
    # A rogue publisher that took over the weights endpoint: with its own server key pair (it
    # lacks the run's server secret) or with no encryption at all.
    rogue_keys = CurveKeys.generate()
    rogues = {
        "own-server-key": ZmqTransport(curve=CurveKeys(keys.server_public,
                                                       rogue_keys.server_secret,
                                                       keys.client_public, keys.client_secret)),
        "plain": ZmqTransport(),
    }
    try:
        for name, t in rogues.items():
            rogue = WeightPublisher(t)
            receiver = WeightReceiver(honest, rogue.endpoint)
            try:
                assert _poll_for(receiver, rogue, 1.0) is None, name
                assert receiver.received == 0 and receiver.rejected == 0  # nothing got through
            finally:
                receiver.close()
                rogue.close()
        # The run's learner reaches the run's actor.
        publisher = WeightPublisher(server)
        receiver = WeightReceiver(honest, publisher.endpoint)
        try:
            got = _poll_for(receiver, publisher, 10.0)
            assert got is not None and got[0].version == 1
            assert torch.equal(got[1]["w"], WEIGHTS["w"])
            # And an eavesdropper without the client key learns nothing from that publisher.
            for name, t in intruders.items():
                spy = WeightReceiver(t, publisher.endpoint)
                try:
                    assert _poll_for(spy, publisher, 0.7) is None, name
                finally:
                    spy.close()
        finally:
            receiver.close()
            publisher.close()
    finally:
        for t in rogues.values():
            t.close()

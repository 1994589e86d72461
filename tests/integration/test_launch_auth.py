"""`launch` authenticates its own sockets by default: its own key wiring.

`test_auth.py` builds keyed transports by hand; here nothing is built by hand. The fast test
checks the keys `launch` generates for a default config (`run_keys`) and that the processes'
keys are what the supervisor hands them. The slow one starts a real tiny launch with default
settings and, while it trains, tries what a local stranger can: talk to the buffer's
control socket (an unauthenticated VersionUpdate would stall the run), push records, subscribe
to the weights. Every attempt fails at the CurveZMQ handshake, and the run finishes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.run.launch import run_keys
from agent_r1_async.run.processes.actor_group import actor_ids
from agent_r1_async.weights.zmq import WeightSubscriber
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.curve import CurveKeys, keys_for
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.records import step


def test_launch_generates_a_key_pair_per_process_by_default() -> None:
    cfg = config_from_dict({"actors": {"num_actors": 3}})
    keys = run_keys(cfg, address=None)
    assert keys is not None  # launch.curve defaults to true, also on one machine
    assert sorted(keys.clients) == ["actor-0", "actor-1", "actor-2", "learner"]
    publics = {pub for pub, _ in keys.clients.values()}
    assert len(publics) == 4 and keys.server_public not in publics
    assert run_keys(cfg, address=None).server_public != keys.server_public  # fresh per launch
    actor = keys_for(keys, actor_ids(cfg)[1])
    assert actor is not None and actor.server_secret == b""  # cannot pose as a server
    assert actor.client_public == keys.clients["actor-1"][0]
    assert actor.peers[keys.clients["learner"][0].decode()] == "learner"
    off = config_from_dict({"launch": {"curve": False}})
    assert run_keys(off, address=None) is None  # the explicit opt-out
    assert run_keys(off, address="auto") is not None  # joining a cluster always authenticates


def _stranger_tries(endpoints: dict[str, str]) -> None:
    """What a local process without the run's keys tried in the drills; each must fail."""
    other = CurveKeys.generate()
    for transport in (ZmqTransport(), ZmqTransport(curve=other)):
        try:
            client = BufferClient(transport, endpoints["control"], "learner", "learner",
                                  timeout_s=1.0, retries=0)
            with pytest.raises(ConnectionError):
                client.connect()
            with pytest.raises(TimeoutError):
                client.set_version(10**9)
            client.close()
            pusher = transport.pusher(endpoints["data"])
            for i in range(4):
                pusher.send([m.encode(step(f"x{i}-e0", f"x{i}", 0))], timeout_ms=100)
            pusher.close()
            spy = WeightSubscriber(transport, endpoints["weights"])
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                assert spy.poll(timeout_ms=100) is None and spy.received == 0
            spy.close()
        finally:
            transport.close()


@pytest.mark.slow
def test_a_default_tiny_launch_refuses_a_stranger(tmp_path: Path) -> None:
    from tests.integration.test_launch import _await_updates, _records, _start

    proc = _start(tmp_path)
    try:
        metrics = _await_updates(proc, tmp_path, 1)
        endpoints = json.loads((metrics.parent / "endpoints.json").read_text())
        assert config_from_dict({}).launch.curve  # the run above used the default
        _stranger_tries(endpoints)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = _records(metrics.parent)
    assert [r["update"] for r in rows] == [1, 2, 3]  # the version never jumped to 10**9
    last = rows[-1]
    assert last.get("buffer/drops/invalid_record", 0) == 0, last  # not one stranger record
    # The run's own processes passed every role check, each actor under its own key.
    refused = [k for k in last if k.startswith(("buffer/drops/unauthorized",
                                               "buffer/drops/invalid_stats"))]
    assert refused == [], refused
    assert last["actor/actor-0/policy_version"] >= 1 and last["actor/actor-1/policy_version"] >= 1

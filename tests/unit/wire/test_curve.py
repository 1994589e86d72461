"""The ZeroMQ facts the role checks rest on (wire/curve.py, wire/roles.py), with real sockets:
the ZAP handler's User-Id is what libzmq attaches to every message of an authenticated peer,
whatever routing id the peer chose; without CurveZMQ there is none."""

from __future__ import annotations

import pytest

from agent_r1_async.wire.curve import ANONYMOUS, CurveKeys, RunKeys
from agent_r1_async.wire.zmq import ZmqTransport


def _recv_from(server_t: ZmqTransport, client_t: ZmqTransport) -> tuple[str | None, str | None]:
    """(user_id seen by a PULL, user_id seen by a ROUTER) for one message from `client_t`."""
    puller = server_t.puller("tcp://127.0.0.1:0")
    server = server_t.server("tcp://127.0.0.1:0")
    pusher = client_t.pusher(puller.endpoint)
    client = client_t.client(server.endpoint, identity="learner-pretender")  # peer-chosen id
    try:
        assert pusher.send([b"record"], timeout_ms=5000)
        assert puller.recv(timeout_ms=5000) is not None
        client._sock.send_multipart([b"request"])
        got = server.recv(timeout_ms=5000)
        assert got is not None and got[0] == b"learner-pretender" and got[1] == [b"request"]
        return puller.user_id, server.user_id
    finally:
        for s in (pusher, client, puller, server):
            s.close()


def test_each_process_is_named_by_the_key_it_authenticated_with() -> None:
    keys = RunKeys.generate(["learner", "actor-0"])
    buffer = ZmqTransport(curve=keys.for_process(None, binds=True))
    actor = ZmqTransport(curve=keys.for_process("actor-0", binds=False))
    learner = ZmqTransport(curve=keys.for_process("learner", binds=True))
    try:
        assert _recv_from(buffer, actor) == ("actor-0", "actor-0")  # not "learner-pretender"
        assert _recv_from(buffer, learner) == ("learner", "learner")
    finally:
        for t in (buffer, actor, learner):
            t.close()


def test_no_identity_without_curve_and_an_anonymous_one_for_hand_built_keys() -> None:
    plain = ZmqTransport()
    keys = CurveKeys.generate()
    server, client = ZmqTransport(curve=keys), ZmqTransport(curve=keys)
    try:
        assert _recv_from(plain, plain) == (None, None)
        assert _recv_from(server, client) == (ANONYMOUS, ANONYMOUS)
    finally:
        for t in (plain, server, client):
            t.close()


def test_a_process_uses_only_the_keys_it_was_given() -> None:
    keys = RunKeys.generate(["learner", "actor-0"])
    buffer = ZmqTransport(curve=keys.for_process(None, binds=True))
    actor = ZmqTransport(curve=keys.for_process("actor-0", binds=False))
    try:
        with pytest.raises(ValueError, match="no server secret"):
            actor.puller("tcp://127.0.0.1:0")  # an actor cannot pose as the buffer
        with pytest.raises(ValueError, match="no client key pair"):
            buffer.pusher("tcp://127.0.0.1:1")
        with pytest.raises(ValueError, match="distinct"):
            RunKeys.generate(["actor-0", "actor-0"])
    finally:
        buffer.close()
        actor.close()

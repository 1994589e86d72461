"""How a closed OpenEnv session is named: a message over the client's size limit names the key
that sets it; a close frame from the server names its code and reason."""

from __future__ import annotations

from websockets.exceptions import ConnectionClosedError
from websockets.frames import Close

from agent_r1_async.envs.openenv.session import Session


def test_a_message_too_big_names_max_message_mb():
    e = ConnectionClosedError(rcvd=None, sent=Close(1009, "frame exceeds limit"))
    assert Session._closed_why(e) == (
        "an answer larger than the client accepts (env.args.max_message_mb): the client closed "
        "the socket (code 1009, message too big)")


def test_a_server_close_names_its_code_and_reason():
    e = ConnectionClosedError(rcvd=Close(1011, "boom"), sent=None)
    assert Session._closed_why(e) == "the server closed the socket (code 1011, boom)"
    assert Session._closed_why(ConnectionClosedError(None, None)) == (
        "the socket closed without a close frame")

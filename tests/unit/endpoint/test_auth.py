"""The endpoint's bearer token: derived from the actor's CurveZMQ secret, checked in constant
time, required beyond loopback only."""

from __future__ import annotations

import pytest

from agent_r1_async.endpoint.auth import (
    EndpointAuthError,
    actor_token,
    authorized,
    required_token,
    token_from_secret,
)
from agent_r1_async.wire.curve import CurveKeys


class _Transport:
    def __init__(self, curve):
        self.curve = curve


def test_each_actor_derives_its_own_token_from_its_curve_secret():
    a, b = CurveKeys.generate(), CurveKeys.generate()
    ta, tb = actor_token(_Transport(a)), actor_token(_Transport(b))
    assert ta == token_from_secret(a.client_secret) and len(ta) == 64 and ta != tb
    assert ta == actor_token(_Transport(a))  # stable for the run
    assert a.client_secret.decode() not in ta
    assert actor_token(_Transport(None)) is None and actor_token(object()) is None


def test_the_token_is_required_beyond_loopback_only():
    assert required_token("127.0.0.1", None) is None
    assert required_token("::1", "t") is None
    assert required_token("0.0.0.0", "t") == "t"
    with pytest.raises(EndpointAuthError, match=r"endpoint\.host '10\.0\.0\.5' is beyond loopback"):
        required_token("10.0.0.5", None)


def test_authorized_wants_the_exact_bearer_token():
    assert authorized(None, None) and authorized("Bearer x", None)
    assert authorized("Bearer tok", "tok") and authorized("bearer tok", "tok")
    assert not authorized(None, "tok") and not authorized("Bearer tok2", "tok")
    assert not authorized("Basic tok", "tok") and not authorized("tok", "tok")


@pytest.mark.parametrize("data, message", [
    ({"endpoint": {"host": "0.0.0.0"}, "launch": {"curve": False}},
     "endpoint.host: '0.0.0.0' exposes the actors' generation endpoints beyond this machine: "
     "set launch.curve: true (each actor's bearer token comes from its CurveZMQ keys)"),
    ({"endpoint": {"port": 70000}}, "endpoint.port: (70000) must be in [0, 65535]"),
    ({"endpoint": {"port": 65535}, "actors": {"num_actors": 2}},
     "endpoint.port: (65535) + actors.num_actors - 1 must be at most 65535: actor i binds "
     "endpoint.port + i"),
])
def test_the_config_refuses_an_endpoint_it_cannot_secure_or_bind(data, message):
    from agent_r1_async.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert str(err.value) == message
    assert config_from_dict({"endpoint": {"host": "0.0.0.0"}}).endpoint.host == "0.0.0.0"

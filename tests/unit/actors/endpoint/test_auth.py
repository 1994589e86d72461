"""The endpoint's tokens: the actor's derived from its CurveZMQ secret (or drawn), a bearer
header read exactly, `endpoint.auth: none` refused beyond loopback, and a session's token
living exactly as long as its session (a table keyed by digests)."""

from __future__ import annotations

import pytest

from agent_r1_async.actors.endpoint.auth import (
    EndpointAuthError,
    actor_token,
    bearer,
    resolve_token,
    same_token,
    token_digest,
    token_from_secret,
)
from agent_r1_async.actors.endpoint.sessions import ENDED_TOKENS_KEPT, Session, SessionStore
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


def test_token_auth_draws_an_actor_token_when_none_is_derived_and_none_is_loopback_only():
    assert resolve_token("token", "127.0.0.1", "t") == "t"
    drawn = {resolve_token("token", "127.0.0.1", None) for _ in range(3)}
    assert len(drawn) == 3 and all(t is not None and len(t) == 43 for t in drawn)
    assert resolve_token("none", "127.0.0.1", "t") is None
    assert resolve_token("none", "::1", None) is None
    with pytest.raises(EndpointAuthError, match=r"endpoint\.host '10\.0\.0\.5' is beyond "
                                                r"loopback, so endpoint\.auth must be token"):
        resolve_token("none", "10.0.0.5", None)


def test_bearer_reads_the_token_of_a_bearer_header_only():
    assert bearer("Bearer tok") == "tok" and bearer("bearer  tok ") == "tok"
    assert bearer(None) is None and bearer("") is None and bearer("Bearer ") is None
    assert bearer("Basic tok") is None and bearer("tok") is None
    assert same_token("tok", "tok") and not same_token("tok2", "tok")


def test_a_session_token_lives_as_long_as_its_session_then_reads_as_ended():
    store = SessionStore()
    a = store.open(Session(SessionStore.new_id(), None))
    b = store.open(Session(SessionStore.new_id(), None))
    assert len(a.token) == 43 and a.token != b.token and a.token not in a.session_id
    assert store.by_token(a.token) is a and store.by_token(b.token) is b
    assert store.by_token(a.session_id) is None and store.by_token("") is None
    store.close(a)
    assert store.by_token(a.token) is None and store.token_ended(a.token)
    assert not store.token_ended(b.token) and not store.token_ended("never")
    assert token_digest(a.token) not in store._tokens  # the table holds digests, not tokens
    for _ in range(ENDED_TOKENS_KEPT):  # the oldest ended token is forgotten first
        store.close(store.open(Session(SessionStore.new_id(), None)))
    assert not store.token_ended(a.token) and store.by_token(b.token) is b


@pytest.mark.parametrize("data, message", [
    ({"endpoint": {"host": "0.0.0.0"}, "launch": {"curve": False}},
     "endpoint.host: '0.0.0.0' exposes the actors' generation endpoints beyond this machine: "
     "set launch.curve: true (each actor's bearer token comes from its CurveZMQ keys)"),
    ({"endpoint": {"port": 70000}}, "endpoint.port: (70000) must be in [0, 65535]"),
    ({"endpoint": {"port": 65535}, "actors": {"num_actors": 2}},
     "endpoint.port: (65535) + actors.num_actors - 1 must be at most 65535: actor i binds "
     "endpoint.port + i"),
    ({"endpoint": {"host": "0.0.0.0", "auth": "none"}},
     "endpoint.auth: none is for a trusted single-user machine, and endpoint.host '0.0.0.0' is "
     "beyond loopback: use token"),
])
def test_the_config_refuses_an_endpoint_it_cannot_secure_or_bind(data, message):
    from agent_r1_async.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert str(err.value) == message
    assert config_from_dict({"endpoint": {"host": "0.0.0.0"}}).endpoint.host == "0.0.0.0"
    assert config_from_dict({}).endpoint.auth == "token"
    assert config_from_dict({"endpoint": {"auth": "none"}}).endpoint.auth == "none"

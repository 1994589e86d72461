"""Who may call an actor's endpoint: anyone on loopback; beyond it, a bearer token.

- On a loopback host (`endpoint.host` 127.0.0.1, localhost, ::1) requests need no token:
  only this machine reaches the port, and recorded calls need a session id, an unguessable
  capability that only the episode's agent is given.
- Beyond loopback every request (except `GET /health`) must carry
  `Authorization: Bearer TOKEN`, compared in constant time; an endpoint asked to bind there
  without a token refuses to start.
- The token is the actor's own per-run secret: derived (keyed BLAKE2b) from the CurveZMQ
  client secret that `launch` hands each actor through Ray (wire/curve.py), never written to
  disk or sent over ZeroMQ. The actor gives it to each black-box agent with its base URL, so
  an agent that runs elsewhere (a sandbox, another host) can present it.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from agent_r1_async.config import LOOPBACK_HOSTS

_CONTEXT = b"agent-r1-async generation endpoint"


class EndpointAuthError(RuntimeError):
    """The endpoint cannot start with these settings (one line naming `endpoint.host`)."""


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS


def token_from_secret(secret: bytes) -> str:
    """The bearer token derived from a per-run secret (64 hex characters)."""
    if not secret:
        raise ValueError("an empty secret derives no token")
    return hashlib.blake2b(_CONTEXT, key=secret[:64], digest_size=32).hexdigest()


def actor_token(transport: Any) -> str | None:
    """The token of the actor whose transport this is: from its CurveZMQ client secret
    (`launch.curve`), or None when the run has no keys (tests, `launch.curve: false`)."""
    curve = getattr(transport, "curve", None)
    secret = getattr(curve, "client_secret", b"") if curve is not None else b""
    return token_from_secret(secret) if secret else None


def required_token(host: str, token: str | None) -> str | None:
    """The token requests must carry on `host` (None: none needed); raises when the host is
    beyond loopback and there is no token."""
    if is_loopback(host):
        return None
    if not token:
        raise EndpointAuthError(
            f"endpoint.host {host!r} is beyond loopback, so every request must carry a bearer "
            "token, and this actor has none: it is derived from the run's CurveZMQ keys "
            "(launch.curve: true)")
    return token


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an `Authorization` header value carries `token` (always, when None)."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())

"""Who may call an actor's endpoint, and what each caller may do (`endpoint.auth`).

`endpoint.auth: token` (the default): every request but `GET /health` carries a bearer token
(`Authorization: Bearer TOKEN`), checked from the headers before any of the body is read; a
request without a valid one is answered 401. A token is one of two kinds:

- a **session token**, made when an episode's session opens and given to that episode's agent
  only (the `api_key` of its function: OpenAI clients send it as their bearer token). It
  authorises generation calls in its own session and nothing else: a request that names
  another session is refused (403), and once the episode has ended the token is refused
  (410 while the endpoint remembers it, 401 after).
- the **actor token**, the actor's own. It may call without a session (served, not recorded)
  and into any open session by naming it. The actor holds it, and so does a server the actor
  starts to play episodes for it (verifiers' EnvServer reads it from its environment, never
  from its argv). It is derived (keyed BLAKE2b) from the actor's CurveZMQ client secret
  when the run has keys, else drawn at random when the endpoint starts.

A session id only names a session: it travels in the base URL an agent is given, so any
process that can read the agent's command line or logs may learn it, and it authorises
nothing. The token never appears in a URL.

`endpoint.auth: none` turns the check off. It is for a trusted single-user machine only:
any local process may then generate with the policy and record steps into any session whose
id it learns. It is refused beyond loopback (config.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
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


def new_token() -> str:
    """A fresh random bearer token (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> bytes:
    """What tokens are looked up by: a table keyed by the digest leaks nothing of the tokens
    it holds through the timing of a lookup."""
    return hashlib.sha256(token.encode()).digest()


def actor_token(transport: Any) -> str | None:
    """The token of the actor whose transport this is: from its CurveZMQ client secret
    (`launch.curve`), or None when the run has no keys (the endpoint then draws one)."""
    curve = getattr(transport, "curve", None)
    secret = getattr(curve, "client_secret", b"") if curve is not None else b""
    return token_from_secret(secret) if secret else None


def resolve_token(mode: str, host: str, token: str | None) -> str | None:
    """The actor token requests are checked against (None: `endpoint.auth: none`, nothing is
    checked); raises for `none` beyond loopback."""
    if mode == "none":
        if not is_loopback(host):
            raise EndpointAuthError(
                f"endpoint.host {host!r} is beyond loopback, so endpoint.auth must be token: "
                "`none` lets anyone who reaches the port record steps into training")
        return None
    return token or new_token()


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header value, or None."""
    scheme, _, given = (header or "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


def same_token(given: str, token: str) -> bool:
    """Whether `given` is `token`, compared in constant time."""
    return hmac.compare_digest(given.encode(), token.encode())

"""A run's CurveZMQ keys: one server key pair, one client key pair per process identity.

`launch` calls `RunKeys.generate([LEARNER, "actor-0", ...])` and hands each process only what
it needs (`keys_for`): the buffer the server pair, the learner the server pair (it binds the
weights PUB) and its own client pair, each actor its own client pair and no server secret (an
actor cannot pose as the buffer or the learner). Every process also gets the table of the
run's client *public* keys → identities: a binding process's ZAP handler admits exactly those
keys and returns the identity as the ZAP User-Id, which libzmq attaches to every message of
that peer (`zmq_msg_gets(msg, "User-Id")`; wire/roles.py decides what each identity may do).
Keys travel as Ray task arguments, never over ZeroMQ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import zmq
import zmq.auth.thread
from zmq.utils import z85

ZmqContext = zmq.Context[zmq.Socket[bytes]]
"""A context whose sockets receive bytes (pyzmq's default socket class)."""

ZAP_DOMAIN = "agent-r1-async"
ANONYMOUS = "client"
"""The identity of a hand-built key set's single client key (no `peers` table): it may
connect, but holds no role."""


class CurveKeys(msgspec.Struct, frozen=True):
    """One process's CurveZMQ keys (Z85 text).

    `server_secret` is b"" in a process that binds nothing (its sockets cannot be servers);
    `client_*` are b"" in one that connects nothing. `peers`: every client public key of the
    run (Z85 text) → its identity; empty = only `client_public` is admitted, as `ANONYMOUS`.
    """

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes
    peers: dict[str, str] = {}

    @classmethod
    def generate(cls) -> CurveKeys:
        """One server pair and one client pair (tests; a run uses `RunKeys`)."""
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public, server_secret, client_public, client_secret)

    def admitted(self) -> dict[bytes, str]:
        """Client public key (Z85) → identity, as the ZAP handler admits them."""
        if self.peers:
            return {k.encode(): v for k, v in self.peers.items()}
        return {self.client_public: ANONYMOUS}


@dataclass(frozen=True)
class RunKeys:
    """All of a run's keys; lives in `launch` only (`keys_for` hands out the pieces)."""

    server_public: bytes
    server_secret: bytes
    clients: dict[str, tuple[bytes, bytes]]
    """identity → (public, secret)."""

    @classmethod
    def generate(cls, identities: Sequence[str]) -> RunKeys:
        if len(set(identities)) != len(identities) or ANONYMOUS in identities:
            raise ValueError(f"identities must be distinct and not {ANONYMOUS!r}: {identities}")
        public, secret = zmq.curve_keypair()
        return cls(public, secret, {name: zmq.curve_keypair() for name in identities})

    def for_process(self, identity: str | None, binds: bool) -> CurveKeys:
        """The keys of one process: `identity`'s client pair (None: connects nothing) and the
        server secret only when it `binds` sockets."""
        public, secret = self.clients[identity] if identity is not None else (b"", b"")
        return CurveKeys(
            self.server_public, self.server_secret if binds else b"", public, secret,
            peers={k.decode(): name for name, (k, _) in self.clients.items()},
        )


def keys_for(keys: RunKeys | None, identity: str | None, binds: bool = False) -> CurveKeys | None:
    """`keys.for_process(...)`, None when the run has no keys (`launch.curve: false`)."""
    return None if keys is None else keys.for_process(identity, binds)


class _KnownClients:
    """ZAP credentials provider: admits the run's client public keys only."""

    def __init__(self, admitted: dict[bytes, str]) -> None:
        self.admitted = admitted

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.admitted  # pyzmq hands the client key over Z85-encoded


class RunAuthenticator(zmq.auth.thread.ThreadAuthenticator):
    """ZAP handler of one binding process: the run's client keys, named by identity."""

    def __init__(self, ctx: ZmqContext, keys: CurveKeys) -> None:
        super().__init__(ctx)
        self._known = _KnownClients(keys.admitted())

    def start(self) -> None:
        super().start()
        self.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self._known)

    def curve_user_id(self, client_public_key: bytes) -> str:
        """The identity libzmq attaches to the peer's messages as their `User-Id` (only
        called for an admitted key)."""
        return self._known.admitted[z85.encode(client_public_key)]

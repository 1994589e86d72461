"""Client of the buffer's control socket (actors ask for credits, learners sample).

One request at a time over a DEALER (the transport's `Client`, lazy-pirate on timeouts).
A request that gets no reply within its timeout is sent again, up to `retries` times, after a
growing pause (`backoff_s`, doubling, at most 5 s); every lost reply is counted in
`.timeouts`. One slow or lost reply therefore costs a retry, not the caller's thread.
Resending is safe for every request: Hello, StatsRequest and VersionUpdate are idempotent; a
SampleRequest replaces the peer's parked one; a CreditRequest whose grant was lost leaves
credits the buffer expires after `buffer.episode_timeout_s` (its grant timeout).

Failures are explicit: no answer after the retries -> `TimeoutError`; an `ErrorReply` or a
reply of the wrong type -> `RuntimeError` naming it; a schema mismatch on `connect` ->
`ConnectionError`.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Literal, TypeVar, get_args

from agent_r1_async.wire import messages as m
from agent_r1_async.wire.transport import Transport

Role = Literal["actor", "learner"]


_R = TypeVar("_R")


class BufferClient:
    def __init__(
        self,
        transport: Transport,
        control_endpoint: str,
        role: Role,
        peer_id: str,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        if role not in get_args(Role):
            raise ValueError(f"role must be 'actor' or 'learner', got {role!r}")
        self.role, self.peer_id, self.timeout_s = role, peer_id, timeout_s
        self.retries, self.backoff_s = retries, backoff_s
        self.timeouts = 0
        """Requests that got no reply in time (each one retried or raised)."""
        self._moved_to: str | None = None
        """Where `retarget` says the buffer is now; applied by the thread that calls."""
        self._moved_lock = threading.Lock()
        # A unique socket identity: two clients with the same peer_id must not collide.
        self._client = transport.client(control_endpoint, f"{peer_id}-{uuid.uuid4().hex[:8]}")

    def connect(self) -> m.HelloAck:
        """Hello handshake; raises ConnectionError on a schema mismatch or no answer."""
        hello = m.Hello(m.SCHEMA_VERSION, self.role, self.peer_id)
        try:
            ack = self._call(hello, m.HelloAck, self.timeout_s)
        except (TimeoutError, RuntimeError) as e:
            raise ConnectionError(f"buffer at {self._client.endpoint}: {e}") from None
        if not ack.ok:
            raise ConnectionError(f"buffer at {self._client.endpoint} refused: {ack.reason}")
        return ack

    def request_credits(self, max_groups: int, held: list[str] | None = None) -> m.CreditGrant:
        """Credits for up to `max_groups` groups; `held`: the groups this actor runs."""
        return self._call(m.CreditRequest(self.peer_id, max_groups, held), m.CreditGrant,
                          self.timeout_s)

    def sample(self, num_groups: int, learner_version: int, timeout_s: float,
               failed_episodes: int = 0) -> m.SampleBatch:
        """A batch (or `ready=False` after the buffer waited `timeout_s` for enough groups),
        with up to `failed_episodes` failed episodes to show (`SampleBatch.failed`)."""
        req = m.SampleRequest(num_groups, learner_version, timeout_s, failed_episodes)
        return self._call(req, m.SampleBatch, timeout_s + self.timeout_s)

    def set_version(self, version: int) -> None:
        self._call(m.VersionUpdate(version), m.VersionAck, self.timeout_s)

    def stats(self) -> m.BufferStats:
        return self._call(m.StatsRequest(), m.BufferStats, self.timeout_s)

    def retarget(self, control_endpoint: str) -> None:
        """From any thread: the buffer now listens at `control_endpoint` (restarted on another
        node). The next request goes there, and so does the next try of a request waiting now
        (after its timeout); the socket itself is only touched by the thread that calls."""
        with self._moved_lock:
            self._moved_to = control_endpoint

    def close(self) -> None:
        self._client.close()

    def _call(self, req: m.ControlMessage, reply_type: type[_R], timeout_s: float) -> _R:
        frame = m.encode(req)
        for attempt in range(self.retries + 1):
            with self._moved_lock:
                moved, self._moved_to = self._moved_to, None
            if moved is not None:
                self._client.reconnect(moved)
            frames = self._client.request([frame], timeout_ms=int(timeout_s * 1000))
            if frames is not None:
                break
            self.timeouts += 1
            if attempt < self.retries:
                time.sleep(min(self.backoff_s * 2**attempt, 5.0))
        else:
            raise TimeoutError(
                f"no reply to {type(req).__name__} within {timeout_s:.1f} s "
                f"({self.retries + 1} tries)"
            )
        if len(frames) != 1:
            raise RuntimeError(f"reply to {type(req).__name__} has {len(frames)} frames")
        reply = m.decode_control(frames[0])
        if isinstance(reply, m.ErrorReply):
            raise RuntimeError(f"buffer refused {type(req).__name__}: {reply.reason}")
        if not isinstance(reply, reply_type):
            raise RuntimeError(
                f"expected {reply_type.__name__} to {type(req).__name__}, got {type(reply).__name__}"
            )
        return reply

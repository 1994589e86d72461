"""The sessions one process holds with its OpenEnv server.

An episode holds one session of its own from its reset to its end: two episodes never share
one, so a GRPO group of 8 concurrent episodes holds 8 sessions (8 server-side Environments).
A session whose episode ended between requests goes back to a pool of idle sessions (at most
`max_idle_sessions`); the next episode's reset takes it, and OpenEnv's reset starts a new
episode on its Environment. A session that broke (dropped, timed out, cancelled, refused) is
closed instead. An idle session may die while it waits (the server restarted, a proxy cut
it): `take()` skips dead ones, and a reset whose session drops opens one new session and
tries once more (env.py). Every coroutine here runs on the host loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agent_r1_async.envs import host_loop
from agent_r1_async.envs.openenv.args import OpenEnvArgs
from agent_r1_async.envs.openenv.server import OpenEnvServer, ServerUnavailable
from agent_r1_async.envs.openenv.session import Session, SessionOpenError


@dataclass
class Lease:
    """One episode's hold on a session (None between episodes)."""

    session: Session | None = None


class SessionPool:
    """Idle sessions to reuse, and every session open, to close at exit."""

    def __init__(self, server: OpenEnvServer, args: OpenEnvArgs) -> None:
        self.server, self.args = server, args
        self.idle: list[Session] = []
        self.open: set[Session] = set()
        self._closing: set[asyncio.Task[None]] = set()

    async def take(self) -> Session:
        """An idle live session, else a new one (a stopped command server is started again
        first). Raises ServerUnavailable with one line naming the server."""
        while self.idle:
            session = self.idle.pop()
            if session.alive:
                return session
            await self.discard(session)
        await self.server.ensure_up()
        a = self.args
        try:
            session = await Session.open(self.server.ws_url, a.headers(), a.connect_timeout_s,
                                         int(a.max_message_mb * 2**20), not self.server.local)
        except SessionOpenError as e:
            note = await self.server.exited()
            raise ServerUnavailable(f"{self.server.label} {note or e}") from None
        self.open.add(session)
        return session

    async def give_back(self, lease: Lease) -> None:
        """The lease's episode ended: keep its session for the next one if it is usable."""
        session, lease.session = lease.session, None
        if session is None:
            return
        if session.alive and not session.busy and len(self.idle) < self.args.max_idle_sessions:
            self.idle.append(session)
        else:
            await self.discard(session)

    def give_back_soon(self, lease: Lease) -> None:
        """`give_back` without waiting, from any thread (the finalizer of an episode's env)."""
        if lease.session is not None:
            coro = self.give_back(lease)
            try:
                host_loop.submit(coro)
            except RuntimeError:  # the host loop is gone (exiting): the socket goes with it
                coro.close()

    async def discard(self, session: Session) -> None:
        """Close a session in the background: a dead link's close handshake can take its
        full timeout, which must not delay the episode's error."""
        self.open.discard(session)
        if session in self.idle:
            self.idle.remove(session)
        task = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_all(self) -> None:
        sessions, self.open, self.idle = list(self.open), set(), []
        await asyncio.gather(*(s.close() for s in sessions), *self._closing,
                             return_exceptions=True)

"""One WebSocket session with an OpenEnv server (its `/ws` endpoint): one server-side
`Environment`, created when the socket opens and destroyed when it closes.

The protocol (openenv-core 0.3, `HTTPEnvServer.register_routes`): one JSON text frame each
way per request.

    reset:  {"type": "reset", "data": {"seed": 3, ...reset keywords}}
    step:   {"type": "step", "data": {...Action fields}}
      both answered by {"type": "observation", "data": {"observation": {...Observation
      fields but reward, done, metadata}, "reward": number | null, "done": bool}}
    state:  {"type": "state"}, answered by {"type": "state", "data": {...State fields}}
    close:  {"type": "close"}: the server ends the session and closes the socket
    error answer: {"type": "error", "data": {"message": str, "code": str, ...}}

An error answer with code CAPACITY_REACHED (the server already holds `max_concurrent_envs`
sessions), FACTORY_ERROR or SESSION_ERROR comes right after the socket opens and the server
closes the socket after it: `SessionRefused`. Any other error answer (VALIDATION_ERROR: the
action does not fit the Action; EXECUTION_ERROR: the Environment raised) leaves the session
open: `ServerError`.

An Environment's state lives in its session only. A session whose socket dropped
(`SessionDropped`), or whose request timed out or was cancelled (a late answer would be read
as the next request's), is never used again; the caller decides what the loss means (env.py:
a drop mid-episode fails that episode, a drop between episodes costs a new session).
A `Session` is used on one event loop only (in the env: the host loop), one request at a
time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

_CLOSE_S = 2.0
REFUSING_CODES = ("CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR")


def one_line(e: BaseException) -> str:
    """One line for an exception: its type and the first line of its message."""
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text[:200]}".rstrip(": ")


def _details(errors: Any) -> str:
    """' (loc: msg; ...)' of a VALIDATION_ERROR's pydantic errors, else ''."""
    if not isinstance(errors, list) or not errors:
        return ""
    parts = []
    for err in errors[:3]:
        if isinstance(err, dict):
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(action)"
            parts.append(f"{loc}: {err.get('msg', '')}")
    return f" ({'; '.join(parts)})" if parts else ""


class SessionError(Exception):
    """A request failed; the message is one line."""


class SessionOpenError(SessionError):
    """The socket could not be opened (refused, timed out, HTTP error at the handshake)."""


class SessionDropped(SessionError):
    """The socket closed or failed: the session and its Environment are gone."""


class SessionTimeout(SessionError):
    """No answer within the timeout; the session is abandoned."""


class SessionRefused(SessionError):
    """The server would not give this socket an Environment (its capacity, its factory)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class ServerError(SessionError):
    """The server answered a request with an error; the session stays usable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class Session:
    """One open `/ws` socket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.broken = ""
        """Why this session must not be used again ("" while it may)."""
        self.busy = False
        """A request is in flight."""

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], timeout_s: float,
                   max_size: int, proxy: bool) -> Session:
        from websockets.asyncio.client import connect

        try:
            ws = await connect(url, additional_headers=headers or None, open_timeout=timeout_s,
                               max_size=max_size, proxy=True if proxy else None)
        except TimeoutError:
            raise SessionOpenError(f"no WebSocket session within connect_timeout_s="
                                   f"{timeout_s:g}") from None
        except Exception as e:  # refused, reset, DNS, HTTP status at the handshake
            raise SessionOpenError(f"cannot open a WebSocket session: {one_line(e)}") from None
        return cls(ws)

    @property
    def alive(self) -> bool:
        from websockets.protocol import State

        return not self.broken and self.ws.state is State.OPEN

    async def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one message and return the `data` of its answer. A socket the server has
        closed is still read: the error frame it sent before closing (a refused session)
        is the answer."""
        if self.broken:
            raise SessionDropped(self.broken)
        self.busy = True
        try:
            return await asyncio.wait_for(self._exchange(message), timeout_s)
        except TimeoutError:
            self.broken = f"no answer within timeout_s={timeout_s:g}"
            raise SessionTimeout(self.broken) from None
        except asyncio.CancelledError:
            self.broken = "a request was cancelled"
            raise
        finally:
            self.busy = False

    async def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        # A send to a socket the server closed fails, but an error frame the server sent
        # before closing is still buffered: recv() returns it.
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(message))
        try:
            raw = await self.ws.recv()
        except ConnectionClosed as e:
            self.broken = self._closed_why(e)
            raise SessionDropped(self.broken) from None
        try:
            answer = json.loads(raw)
            kind, data = answer["type"], answer.get("data", {})
            if not isinstance(data, dict):
                raise TypeError("data is not an object")
        except (ValueError, KeyError, TypeError) as e:
            self.broken = f"an answer that is not an OpenEnv message ({one_line(e)})"
            raise SessionDropped(self.broken) from None
        if kind == "error":
            code, text = str(data.get("code", "UNKNOWN")), str(data.get("message", ""))
            if code in REFUSING_CODES:
                self.broken = f"refused: {code}"
                raise SessionRefused(code, text)
            raise ServerError(code, text + _details(data.get("errors")))
        if kind != "observation":
            self.broken = f"an answer of type {kind!r} to a {message['type']!r}"
            raise SessionDropped(self.broken)
        return data

    @staticmethod
    def _closed_why(e: BaseException) -> str:
        from websockets.exceptions import ConnectionClosed

        if isinstance(e, ConnectionClosed) and e.sent is not None and e.sent.code == 1009:
            return ("an answer larger than the client accepts (env.args.max_message_mb): the "
                    "client closed the socket (code 1009, message too big)")
        if isinstance(e, ConnectionClosed) and e.rcvd is not None:
            reason = f", {e.rcvd.reason}" if e.rcvd.reason else ""
            return f"the server closed the socket (code {e.rcvd.code}{reason})"
        return "the socket closed without a close frame"

    async def close(self) -> None:
        """End the session: a close message when the socket is open (the server then ends
        the session and closes the socket itself), then the socket."""
        with contextlib.suppress(Exception):
            if self.alive and not self.busy:
                await asyncio.wait_for(self.ws.send(json.dumps({"type": "close"})), _CLOSE_S)
                await asyncio.wait_for(self.ws.wait_closed(), _CLOSE_S)
        self.broken = self.broken or "closed"
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), _CLOSE_S)

"""The actor's HTTP endpoint: aiohttp on the actor's own event loop.

Routes (each also under `/sessions/ID/...`, the base URL a black-box agent is given):

    POST /inference/v1/generate     token-in/token-out, vLLM's shape (tito.py)
    POST /v1/chat/completions       OpenAI chat completions (chat.py)
    GET  /v1/models                 the one model served (OpenAI clients may ask)
    GET  /health                    200 while serving (no token needed)

The server runs as tasks of the loop that runs the actor's episodes, so a request's
generation is an ordinary `await engine.generate(...)` beside the rollouts: no thread, no
queue, the engine batches them together. Errors answer in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`) with a 4xx/5xx status, one line each;
an unexpected exception in a handler is logged and answered 500, never raised into the loop.

Every request but /health needs a bearer token (auth.py), checked from its headers before
its body is read. What a request may cost the actor's loop is bounded before the expensive
parts: a body longer than the service's `max_body_bytes` (what the longest context the model
takes can need) is refused 413 from its Content-Length or while it streams in; JSON nested
deeper than the parser allows is a 400; a chat whose text alone cannot fit
`model.max_model_len` is refused before it is rendered or tokenized (service.py), and a
token-in/token-out prompt before its ids are checked one by one. A refused request is
answered after `REFUSED_DELAY_S` (the caller waits; the loop does not), so a caller that
sends junk back to back gets at most a few answers a second per connection; one refused
before its body was read (401, 413) also has its connection closed, so its body is never
read at all. Each answer is counted by status class (`2xx`, `401`, `4xx`, `5xx`) in the
actor's counters, which reach the metrics as `endpoint/requests/<class>`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from agent_r1_async.actors.endpoint.auth import bearer, resolve_token, same_token
from agent_r1_async.actors.endpoint.chat import chat_response, parse_chat
from agent_r1_async.actors.endpoint.params import RequestError
from agent_r1_async.actors.endpoint.service import GenerationService
from agent_r1_async.actors.endpoint.sessions import ACTOR, SESSION_HEADER, Caller, Session
from agent_r1_async.actors.endpoint.tito import generate_response, parse_generate

log = logging.getLogger(__name__)

_SHUTDOWN_S = 2.0
REFUSED_DELAY_S = 0.1
"""How long a refused request waits for its answer (module docstring)."""
_UNREAD = (401, 413)
"""Refusals answered before the body is read: their connection is closed, body unread."""
_CALLER = web.RequestKey("caller", Caller)
_ANY_HOST = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _error(e: RequestError) -> web.Response:
    body = {"error": {"message": e.message, "type": e.kind, "param": None, "code": e.code}}
    return web.json_response(body, status=e.status)


def _too_large(limit: int) -> RequestError:
    return RequestError(f"the request body is over {limit} bytes, more than a request that "
                        "fits model.max_model_len can need", 413, "invalid_request_error",
                        "body_too_large")


async def _body(request: web.Request, limit: int) -> dict[str, Any]:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError("the request body is not JSON") from None
    except RecursionError:
        raise RequestError("the request body is JSON nested too deeply", 400,
                           "invalid_request_error", "too_deep") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def _named_session(request: web.Request) -> str | None:
    """The session a request's path or X-Session-Id header names."""
    return request.match_info.get("sid") or request.headers.get(SESSION_HEADER) or None


def _session_id(request: web.Request, body: dict[str, Any]) -> str | None:
    """The path's session, else the X-Session-Id header, else a chat request's `user`."""
    sid = _named_session(request)
    if not sid and request.path.endswith("/chat/completions"):
        user = body.get("user")
        sid = user if isinstance(user, str) else None
    return sid or None


def _status_class(status: int) -> str:
    return "401" if status == 401 else f"{status // 100}xx"


class Endpoint:
    """One actor's endpoint; `start` on the loop that runs the actor's episodes."""

    def __init__(self, service: GenerationService, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, auth: str = "token") -> None:
        self.service = service
        self.host, self.port = host, port
        self.auth = auth
        self.token = token
        """The actor token (auth.py); drawn at start when none is given, None under
        `endpoint.auth: none`."""
        self._runner: web.AppRunner | None = None
        self.url = ""
        """The root URL, once started (http://127.0.0.1:PORT for a wildcard host)."""

    @property
    def api_key(self) -> str:
        """The actor token as a client sends it (OpenAI clients need a key even when unused)."""
        return self.token or "unused"

    def session_key(self, session: Session) -> str:
        """What the agent of `session` sends as its bearer token."""
        return session.token if self.token is not None else "unused"

    def session_url(self, session_id: str) -> str:
        """The OpenAI base URL whose calls land in this session."""
        return f"{self.url}/sessions/{session_id}/v1"

    async def start(self) -> str:
        """Bind and serve; the root URL. Refuses `endpoint.auth: none` beyond loopback."""
        self.token = resolve_token(self.auth, self.host, self.token)
        app = web.Application(middlewares=[self._guard],
                              client_max_size=self.service.max_body_bytes)
        for prefix in ("", "/sessions/{sid}"):
            app.router.add_post(f"{prefix}/inference/v1/generate", self._generate)
            app.router.add_post(f"{prefix}/v1/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/v1/models", self._models)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_S)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise OSError(f"endpoint.host {self.host!r} port {self.port}: cannot bind: "
                          f"{e.strerror or e}") from None
        self._runner = runner
        port = runner.addresses[0][1]
        host = _ANY_HOST.get(self.host, self.host)
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        return self.url

    async def stop(self) -> None:
        """End every session (calls in flight are answered 410), then stop serving."""
        self.service.sessions.close_all()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        status = 500
        try:
            if request.path != "/health":
                request[_CALLER] = self._caller(request)
                limit = self.service.max_body_bytes
                if request.content_length is not None and request.content_length > limit:
                    raise _too_large(limit)
            response: web.StreamResponse = await handler(request)
            status = response.status
            return response
        except RequestError as e:
            status = e.status
            self.service.stats.refused += 1
            await asyncio.sleep(REFUSED_DELAY_S)
            refusal = _error(e)
            if e.status in _UNREAD:
                refusal.force_close()
            return refusal
        except web.HTTPException as e:
            status = e.status
            raise
        except Exception as e:
            self.service.stats.refused += 1
            log.exception("endpoint: %s %s failed", request.method, request.path)
            return _error(RequestError(f"{type(e).__name__}: {e}", 500, "server_error"))
        finally:
            self.service.counters.endpoint_requests[_status_class(status)] += 1

    def _caller(self, request: web.Request) -> Caller:
        """Who sent `request`, from its headers alone (auth.py); RequestError when nobody
        it may be."""
        if self.token is None:
            return ACTOR
        given = bearer(request.headers.get("Authorization"))
        if given is None:
            raise RequestError("this endpoint needs a bearer token (Authorization: Bearer "
                               "TOKEN): each episode's agent is given its session's token as "
                               "its api_key", 401, "authentication_error", "missing_token")
        if same_token(given, self.token):
            return ACTOR
        sessions = self.service.sessions
        session = sessions.by_token(given)
        if session is None:
            if sessions.token_ended(given):
                raise RequestError("this session's episode has ended", 410,
                                   "invalid_request_error", "session_ended")
            raise RequestError("wrong bearer token", 401, "authentication_error",
                               "invalid_token")
        named = _named_session(request)
        if named is not None and named != session.session_id:
            raise RequestError("the bearer token is another session's: a session's calls "
                               "carry its own token", 403, "permission_error", "wrong_session")
        return Caller(session)

    def _session(self, request: web.Request, body: dict[str, Any]) -> Session:
        """The session a request lands in: its token's, or, for the actor, the one it names
        (a throwaway unrecorded one when it names none)."""
        caller = request[_CALLER]
        if caller.session is not None:
            return caller.session
        return self.service.session(_session_id(request, body))

    async def _generate(self, request: web.Request) -> web.Response:
        svc = self.service
        body = await _body(request, svc.max_body_bytes)
        session = self._session(request, body)
        req = parse_generate(body, svc.sampling, svc.vocab_size, svc.max_model_len)
        call = await svc.generate(session, req)
        return web.json_response(generate_response(req, call, svc.model_name))

    async def _chat(self, request: web.Request) -> web.Response:
        svc = self.service
        body = await _body(request, svc.max_body_bytes)
        session = self._session(request, body)
        req = parse_chat(body, svc.sampling)
        call, ans, pieces = await svc.chat(session, req)
        return web.json_response(chat_response(req, call, ans, pieces, svc.model_name))

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": self.service.model_name, "object": "model", "created": 0,
                 "owned_by": "agent-r1-async"}
        return web.json_response({"object": "list", "data": [model]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "sessions": len(self.service.sessions)})

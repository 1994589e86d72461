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
Beyond loopback every request but /health needs the bearer token (auth.py).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from agent_r1_async.endpoint.auth import authorized, required_token
from agent_r1_async.endpoint.chat import chat_response, parse_chat
from agent_r1_async.endpoint.params import RequestError
from agent_r1_async.endpoint.service import GenerationService
from agent_r1_async.endpoint.sessions import SESSION_HEADER
from agent_r1_async.endpoint.tito import generate_response, parse_generate

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20
_SHUTDOWN_S = 2.0
_ANY_HOST = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _error(e: RequestError) -> web.Response:
    body = {"error": {"message": e.message, "type": e.kind, "param": None, "code": e.code}}
    return web.json_response(body, status=e.status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def _session_id(request: web.Request, body: dict[str, Any]) -> str | None:
    """The path's session, else the X-Session-Id header, else a chat request's `user`."""
    sid = request.match_info.get("sid") or request.headers.get(SESSION_HEADER)
    if not sid and request.path.endswith("/chat/completions"):
        user = body.get("user")
        sid = user if isinstance(user, str) else None
    return sid or None


class Endpoint:
    """One actor's endpoint; `start` on the loop that runs the actor's episodes."""

    def __init__(self, service: GenerationService, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None) -> None:
        self.service = service
        self.host, self.port = host, port
        self.token = token
        self._runner: web.AppRunner | None = None
        self.url = ""
        """The root URL, once started (http://127.0.0.1:PORT for a wildcard host)."""

    @property
    def api_key(self) -> str:
        """What a client sends as its bearer token (OpenAI clients need one even when unused)."""
        return self.token or "unused"

    def session_url(self, session_id: str) -> str:
        """The OpenAI base URL whose calls land in this session."""
        return f"{self.url}/sessions/{session_id}/v1"

    async def start(self) -> str:
        """Bind and serve; the root URL. Refuses a host beyond loopback without a token."""
        self.token = required_token(self.host, self.token)
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES)
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
        try:
            if request.path != "/health" and not authorized(
                    request.headers.get("Authorization"), self.token):
                raise RequestError("missing or wrong bearer token (Authorization: Bearer TOKEN)",
                                   401, "authentication_error")
            response: web.StreamResponse = await handler(request)
            return response
        except RequestError as e:
            self.service.stats.refused += 1
            return _error(e)
        except web.HTTPException:
            raise
        except Exception as e:
            self.service.stats.refused += 1
            log.exception("endpoint: %s %s failed", request.method, request.path)
            return _error(RequestError(f"{type(e).__name__}: {e}", 500, "server_error"))

    async def _generate(self, request: web.Request) -> web.Response:
        body = await _body(request)
        svc = self.service
        session = svc.session(_session_id(request, body))
        req = parse_generate(body, svc.sampling, svc.vocab_size)
        call = await svc.generate(session, req)
        return web.json_response(generate_response(req, call, svc.model_name))

    async def _chat(self, request: web.Request) -> web.Response:
        body = await _body(request)
        svc = self.service
        session = svc.session(_session_id(request, body))
        req = parse_chat(body, svc.sampling)
        call, ans, pieces = await svc.chat(session, req)
        return web.json_response(chat_response(req, call, ans, pieces, svc.model_name))

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": self.service.model_name, "object": "model", "created": 0,
                 "owned_by": "agent-r1-async"}
        return web.json_response({"object": "list", "data": [model]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "sessions": len(self.service.sessions)})

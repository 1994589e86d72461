"""An endpoint on loopback for the endpoint tests: any engine (a `FakeEngine` mostly), the
SmolLM2 tokenizer, real HTTP through aiohttp, and a recorded session whose records are kept."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.endpoint.params import EngineSampling
from agent_r1_async.actors.endpoint.recorder import StepRecorder
from agent_r1_async.actors.endpoint.server import Endpoint
from agent_r1_async.actors.endpoint.service import GenerationService
from agent_r1_async.actors.endpoint.sessions import Session, SessionStore
from agent_r1_async.actors.rollout import EpisodeIds
from agent_r1_async.wire.messages import decode_data, encode


def make_service(engine: Any, tokenizer: Any, *, max_model_len: int = 512,
                 max_new_tokens: int = 64, **sampling: Any) -> GenerationService:
    return GenerationService(
        engine=engine, tokenizer=tokenizer, builder=FullContext(),
        sampling=EngineSampling(max_new_tokens=max_new_tokens, **sampling),
        max_model_len=max_model_len, vocab_size=len(tokenizer), model_name="tiny")


@contextlib.asynccontextmanager
async def serving(service: GenerationService, host: str = "127.0.0.1", token: str | None = None,
                  auth: str = "token", key: str | None = "actor",
                  ) -> AsyncIterator[tuple[Endpoint, aiohttp.ClientSession]]:
    """The endpoint and an HTTP client that sends, by default, the actor's token (it may call
    into any session); `key=None`: a client with no token."""
    endpoint = Endpoint(service, host, 0, token, auth)
    await endpoint.start()
    headers = ({"Authorization": f"Bearer {endpoint.token if key == 'actor' else key}"}
               if key is not None and endpoint.token is not None else {})
    try:
        async with aiohttp.ClientSession(headers=headers) as http:
            yield endpoint, http
    finally:
        await endpoint.stop()


def recorded_session(service: GenerationService, max_calls: int | None = 4,
                     ) -> tuple[Session, list[Any]]:
    """An open session recording into the returned list (each message as the wire decodes it)."""
    sent: list[Any] = []

    async def emit(msg: Any) -> None:
        sent.append(decode_data(encode(msg)))

    recorder = StepRecorder(EpisodeIds("ep-1", "g-1", 1), "task-1", "actor-0", "blackbox", emit)
    session = Session(SessionStore.new_id(), service.tokenizer, max_calls, recorder)
    return service.sessions.open(session), sent


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any],
               **headers: str) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()

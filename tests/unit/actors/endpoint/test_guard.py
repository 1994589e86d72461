"""What the endpoint lets through, over real HTTP on loopback (scripted engine, SmolLM2's
tokenizer): a session's token reaches its own session only, a session id alone authorises
nothing, a call without a token is answered 401 before its body is read, an oversized body
413 before it is read, a chat too long for the model 400 before it is rendered, and every
malformed body a 4xx naming what is wrong. Each answer is counted by status class."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest

from agent_r1_async.actors.endpoint.episodes import check_credentials
from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from tests.fakes.engine import FakeEngine
from tests.unit.actors.endpoint.serving import make_service, post, recorded_session, serving

IM_END = 2
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


def _engine(tok) -> FakeEngine:
    return FakeEngine.repeating([*tok.encode("ok", add_special_tokens=False), IM_END])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_session_token_reaches_its_own_session_only_and_ends_with_it(tok):
    engine = _engine(tok)
    service = make_service(engine, tok)
    a, _ = recorded_session(service, max_calls=None)
    b, _ = recorded_session(service, max_calls=None)

    async def run() -> list[tuple[int, Any]]:
        async with serving(service, key=None) as (endpoint, http):
            root = endpoint.url
            chat_a = f"{endpoint.session_url(a.session_id)}/chat/completions"
            chat_b = f"{endpoint.session_url(b.session_id)}/chat/completions"
            out = [
                await post(http, chat_a, CHAT),  # the session id alone
                await post(http, chat_a, CHAT, **bearer(a.session_id)),
                await post(http, chat_a, CHAT, Authorization="Bearer"),
                await post(http, chat_a, CHAT, **bearer(a.token)),
                await post(http, f"{root}/v1/chat/completions", CHAT, **bearer(a.token)),
                await post(http, chat_b, CHAT, **bearer(a.token)),
                await post(http, f"{root}/inference/v1/generate", {"token_ids": [5]},
                           **{**bearer(a.token), "X-Session-Id": b.session_id}),
                await post(http, f"{root}/v1/chat/completions", {**CHAT, "user": b.session_id},
                           **bearer(a.token)),
            ]
            async with http.get(f"{root}/v1/models") as r:
                out.append((r.status, await r.json()))
            async with http.get(f"{root}/health") as r:
                out.append((r.status, await r.json()))
            service.sessions.close(a)
            out.append(await post(http, chat_a, CHAT, **bearer(a.token)))
            return out

    got = asyncio.run(run())
    statuses = [s for s, _ in got]
    assert statuses == [401, 401, 401, 200, 200, 403, 403, 200, 401, 200, 410]
    codes = [body.get("error", {}).get("code") for _, body in got]
    assert codes[:3] == ["missing_token", "invalid_token", "missing_token"]
    assert codes[5:7] == ["wrong_session", "wrong_session"] and codes[10] == "session_ended"
    # The token, not the path or `user`, decides the session: steps 0, 1, 2 all land in a.
    assert [got[i][1]["agent_r1"]["session_id"] for i in (3, 4, 7)] == [a.session_id] * 3
    assert [got[i][1]["agent_r1"]["step_index"] for i in (3, 4, 7)] == [0, 1, 2]
    assert a.recorder.recorded == 3 and b.recorder.recorded == 0
    assert len(engine.calls) == 3
    assert dict(service.counters.endpoint_requests) == {"401": 4, "2xx": 4, "4xx": 3}


def test_the_actor_token_calls_unrecorded_or_into_a_named_session(tok):
    engine = _engine(tok)
    service = make_service(engine, tok)
    a, _ = recorded_session(service, max_calls=None)

    async def run() -> list[tuple[int, Any]]:
        async with serving(service) as (endpoint, http):  # the client sends the actor token
            return [await post(http, f"{endpoint.url}/v1/chat/completions", CHAT),
                    await post(http, f"{endpoint.session_url(a.session_id)}/chat/completions",
                               CHAT)]

    (s1, r1), (s2, r2) = asyncio.run(run())
    assert (s1, s2) == (200, 200)
    assert r1["agent_r1"]["session_id"] is None and r2["agent_r1"]["step_index"] == 0
    assert a.recorder.recorded == 1 and service.stats.unrecorded == 1


def test_auth_none_serves_any_local_caller_without_a_token(tok):
    service = make_service(_engine(tok), tok)

    async def run() -> int:
        async with serving(service, auth="none", key=None) as (endpoint, http):
            assert endpoint.token is None
            return (await post(http, f"{endpoint.url}/v1/chat/completions", CHAT))[0]

    assert asyncio.run(run()) == 200


def _raw_answer(url: str, head: str, timeout_s: float = 5.0) -> tuple[str, float]:
    """Send only a request's head (its body never follows) and read the status line: an
    answer at all proves the server did not wait for the body. (status line, seconds)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    t0 = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(head.encode())
        data = s.recv(4096).decode(errors="replace")
    return data.split("\r\n", 1)[0], time.perf_counter() - t0


def test_no_token_and_an_oversized_body_are_refused_from_the_headers_alone(tok):
    engine = _engine(tok)
    service = make_service(engine, tok)
    a, _ = recorded_session(service)

    async def run() -> tuple[str, str]:
        async with serving(service, key=None) as (endpoint, _http):
            path = f"/sessions/{a.session_id}/v1/chat/completions"
            big = service.max_body_bytes + 1
            no_token = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Content-Length: 1000000\r\n\r\n")
            oversized = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}"
                         f"\r\nContent-Type: application/json\r\nContent-Length: {big}\r\n\r\n")
            first = await asyncio.to_thread(_raw_answer, endpoint.url, no_token)
            second = await asyncio.to_thread(_raw_answer, endpoint.url, oversized)
            return first[0], second[0]

    no_token, oversized = asyncio.run(run())
    assert no_token == "HTTP/1.1 401 Unauthorized"
    assert oversized == "HTTP/1.1 413 Request Entity Too Large"
    assert a.recorder.recorded == 0 and engine.calls == []
    # 512 tokens of SmolLM2's longest spelling (81 characters), 6 bytes a character, 128 a token.
    assert service.max_token_chars == 81
    assert service.max_body_bytes == 512 * (6 * 81 + 128) + 65536


def test_a_chat_whose_text_cannot_fit_is_refused_before_it_is_rendered(tok):
    engine = _engine(tok)
    service = make_service(engine, tok, max_model_len=512)
    a, _ = recorded_session(service)
    # 512 * 81 characters cannot be spelled in fewer than 512 tokens of this vocabulary.
    body = {"messages": [{"role": "user", "content": "x" * (512 * 81)}]}

    def no_render(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("rendered a conversation that cannot fit")

    a.segments.place = no_render  # type: ignore[method-assign]

    async def run() -> tuple[int, Any]:
        async with serving(service) as (endpoint, http):
            return await post(http, f"{endpoint.session_url(a.session_id)}/chat/completions",
                              body)

    status, resp = asyncio.run(run())
    assert status == 400 and resp["error"]["code"] == "context_length_exceeded"
    assert resp["error"]["message"] == ("context of at least 512 tokens reaches "
                                        "model.max_model_len=512")
    assert a.cut == ("env_error", "the agent's first context of at least 512 tokens reaches "
                                  "model.max_model_len=512")
    assert engine.calls == []


@pytest.mark.parametrize("raw, status, code, message", [
    ("[" * 100_000 + "]" * 100_000, 400, "too_deep", "the request body is JSON nested too "
                                                       "deeply"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temprature": 0.1}', 400,
     "unknown_field", "temprature: unknown field (did you mean temperature?)"),
    ('{"messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}', 400,
     "unknown_field", "frobnicate: unknown field;"),
    ('{"messages": [{"role": "user", "content": "hi"}], "echo": true}', 400, None,
     "echo=True is not served"),
    ('{"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{x}}"}', 400, None,
     "chat_template='{{x}}' is not served"),
    ("not json", 400, None, "the request body is not JSON"),
    ("[1, 2]", 400, None, "the request body must be a JSON object"),
])
def test_every_malformed_chat_body_is_a_4xx_naming_what_is_wrong(tok, raw, status, code,
                                                                   message):
    engine = _engine(tok)
    service = make_service(engine, tok)

    async def run() -> tuple[int, Any]:
        async with serving(service) as (endpoint, http), http.post(
                f"{endpoint.url}/v1/chat/completions", data=raw,
                headers={"Content-Type": "application/json"}) as r:
            return r.status, await r.json()

    got_status, body = asyncio.run(run())
    assert got_status == status and body["error"]["code"] == code
    assert body["error"]["message"].startswith(message), body
    assert engine.calls == []


def test_token_in_token_out_refuses_unknown_fields_and_states_a_capped_budget(tok):
    engine = _engine(tok)
    service = make_service(engine, tok, max_model_len=64, max_new_tokens=8)

    async def run() -> list[tuple[int, Any]]:
        async with serving(service) as (endpoint, http):
            gen = f"{endpoint.url}/inference/v1/generate"
            return [
                await post(http, gen, {"token_ids": [5], "sampling_params": {"temprature": 1}}),
                await post(http, gen, {"token_ids": [5], "sampler": {}}),
                # Ids past the model's length are refused by length, not read one by one.
                await post(http, gen, {"token_ids": [-1] * 64}),
                await post(http, gen, {"token_ids": [5], "sampling_params": {
                    "max_tokens": 10**12}}),
                await post(http, f"{endpoint.url}/v1/chat/completions",
                           {**CHAT, "max_tokens": 3}),
            ]

    (s1, b1), (s2, b2), (s3, b3), (s4, b4), (s5, b5) = asyncio.run(run())
    assert s1 == 400 and b1["error"]["message"].startswith(
        "sampling_params.temprature: unknown field (did you mean sampling_params.temperature?)")
    assert s2 == 400 and b2["error"]["message"].startswith("sampler: unknown field")
    assert s3 == 400 and b3["error"]["message"] == ("context of 64 tokens reaches "
                                                    "model.max_model_len=64")
    assert s4 == 200 and b4["agent_r1"]["max_tokens"] == 8
    assert b4["agent_r1"]["max_tokens_requested"] == 10**12
    assert s5 == 200 and b5["agent_r1"]["max_tokens"] == 3
    assert "max_tokens_requested" not in b5["agent_r1"]
    assert [budget for _, budget in engine.calls] == [8, 3]


def test_an_agent_that_takes_no_key_is_refused_at_configuration():
    from agent_r1_async.config import ConfigError

    env = {"name": "blackbox", "args": {"agent": "tests.unit.actors.endpoint.agents:takes_no_key",
                                        "tasks": "tests.unit.actors.endpoint.agents:tasks"}}
    cfg = config_from_dict({"env": env})
    definition = get_env_spec(cfg.env).definition
    with pytest.raises(ConfigError, match=r"^config key `env.args.agent`: tests.unit.actors.endpoint."
                                          r"agents:takes_no_key takes no api_key, and the "
                                          r"generation endpoint authenticates every call"):
        check_credentials(cfg, definition)
    check_credentials(config_from_dict({"env": env, "endpoint": {"auth": "none"}}), definition)


def test_the_request_counts_reach_the_metrics_and_a_flood_is_said_once():
    from agent_r1_async.run.output.watches import REFUSED_FLOOD, RefusalWatch

    now = [0.0]
    watch = RefusalWatch(clock=lambda: now[0])

    def stats(n401: int, n4xx: int) -> dict[str, Any]:
        return {"actor-0": {"endpoint_requests": {"401": n401, "4xx": n4xx, "2xx": 50},
                            "endpoint_url": "http://127.0.0.1:4000"}}

    assert watch.observe(stats(0, 0)) == []
    now[0] = 30.0
    assert watch.observe(stats(REFUSED_FLOOD - 2, 1)) == []  # one short of the flood
    now[0] = 40.0
    [(actor, line)] = watch.observe(stats(REFUSED_FLOOD - 2, 2))
    assert actor == "actor-0" and line.startswith(
        f"actor-0: its generation endpoint http://127.0.0.1:4000 refused {REFUSED_FLOOD} "
        f"requests in the last 40 s ({REFUSED_FLOOD - 2} without a valid token, 2 malformed)")
    now[0] = 60.0
    assert watch.observe(stats(3 * REFUSED_FLOOD, 2)) == []  # said already: quiet for a while
    now[0] = 200.0  # a window with no new refusals
    assert watch.observe(stats(3 * REFUSED_FLOOD, 2)) == []
    from agent_r1_async.run.output.metric_names import merge_metrics

    flat, _ = merge_metrics({"version": 1, "metrics": {}}, {"actors": {"actor-0": {
        "weight_sync_latency_s": 0.0, "policy_version": 1, "episodes_in_flight": 0,
        "episodes_done": 0, "gen_time_s": 0.0, "env_time_s": 0.0, "tokens_per_s": 0.0,
        "episodes_per_s": 0.0, "endpoint_requests": {"401": 7, "2xx": 3}}}})
    assert flat["endpoint/requests/401"] == 7 and flat["endpoint/requests/2xx"] == 3
    assert json.dumps(flat)  # plain numbers, as W&B takes them

"""The endpoint over real HTTP on loopback (aiohttp), with a scripted engine and the real
SmolLM2 tokenizer: a chat conversation extends its session's exact tokens turn after turn
(SmolLM2's template; Qwen2.5's tool-calling template with tool calls and tool results), a
conversation that does not extend its history is counted as a divergence and starts afresh,
sessions are named by path, header or `user`, and the token rules beyond loopback hold."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from typing import Any

import pytest

from agent_r1_async.actors.endpoint.auth import EndpointAuthError, token_from_secret
from agent_r1_async.actors.endpoint.server import Endpoint
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import StepRecord
from tests.fakes.engine import FakeEngine
from tests.unit.actors.endpoint.serving import make_service, post, recorded_session, serving

IM_END = 2  # SmolLM2's <|im_end|>, its eos

# Qwen2.5-Instruct's chat template, verbatim (tokenizer_config.json of Qwen/Qwen2.5-*-Instruct;
# the same text ships as trl/chat_templates/qwen2_5.jinja). Its special tokens <|im_start|> and
# <|im_end|> are SmolLM2's too, so the SmolLM2 tokenizer renders it offline.
QWEN25_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == "
    "'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are "
    "Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n    "
    "{{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" "
    "}}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    "
    "{%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with "
    "function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\""
    "name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>"
    "\\n\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- "
    "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n  "
    "      {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}"
    "\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) "
    "or (message.role == \"assistant\" and not message.tool_calls) %}\n        {{- '<|im_start|>"
    "' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif "
    "message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n        "
    "{%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}"
    "\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function "
    "is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- "
    "endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- "
    "tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n            {{- "
    "tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n        {%- endfor "
    "%}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if "
    "(loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- "
    "'<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n      "
    "  {{- message.content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or "
    "(messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n      "
    "  {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- "
    "'<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)
CALCULATOR = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


@pytest.fixture(scope="module")
def qwen_tok(tok):
    qtok = copy.copy(tok)
    qtok.chat_template = QWEN25_TEMPLATE
    return qtok


def enc(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def whole(tok, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
          ) -> list[int]:
    """The conversation rendered at once, as a template-applying server would (OpenAI's
    JSON-string tool arguments parsed into objects first, as vLLM does)."""
    rendered = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None or k != "content"}
        if m.get("tool_calls"):
            m["tool_calls"] = [{"type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"])}} for c in m["tool_calls"]]
        rendered.append(m)
    extra = {"tools": tools} if tools else {}
    return list(tok.apply_chat_template(rendered, tokenize=True, add_generation_prompt=True,
                                        return_dict=False, **extra))


async def converse(tok, turns: list[tuple[list[dict[str, Any]], str]],
                   tools: list[dict[str, Any]] | None = None):
    """Play a conversation over HTTP on a recorded session: each turn appends its new
    messages, posts the whole conversation, then appends the answer exactly as the response
    showed it. (The engine, the responses, the step records.)"""
    engine = FakeEngine.scripted([[*enc(tok, text), IM_END] for _, text in turns])
    service = make_service(engine, tok)
    session, sent = recorded_session(service)
    messages: list[dict[str, Any]] = []
    responses = []
    async with serving(service) as (endpoint, http):
        for new, _ in turns:
            messages += new
            body: dict[str, Any] = {"model": "tiny", "messages": messages}
            if tools:
                body["tools"] = tools
            status, resp = await post(
                http, f"{endpoint.session_url(session.session_id)}/chat/completions", body)
            assert status == 200, resp
            responses.append(resp)
            messages.append(resp["choices"][0]["message"])
        await session.recorder.finish(done=True)
    return engine, responses, [m for m in sent if isinstance(m, StepRecord)]


def test_chat_keeps_a_three_turn_conversation_token_exact_smollm2(tok):
    turns = [
        ([{"role": "system", "content": "Answer briefly."},
          {"role": "user", "content": "What is 12 times 7?"}], "It is 84."),
        ([{"role": "user", "content": "And 84 plus 16?"}], "That makes 100."),
        ([{"role": "user", "content": "Halve it."}], "50."),
    ]
    engine, responses, records = asyncio.run(converse(tok, turns))
    conversation: list[dict[str, Any]] = []
    for i, (new, text) in enumerate(turns):
        conversation += new
        want = whole(tok, conversation)
        assert engine.calls[i][0] == want  # the context the engine saw: the whole rendering
        assert responses[i]["choices"][0]["message"] == {"role": "assistant", "content": text}
        ext = responses[i]["agent_r1"]
        assert ext["prompt_token_ids"] == want and ext["token_ids"] == [*enc(tok, text), IM_END]
        assert (ext["step_index"], ext["segment"], ext["diverged"]) == (i, 0, False)
        assert records[i].context_ids.tolist() == want
        assert records[i].action_ids.tolist() == [*enc(tok, text), IM_END]
        conversation.append({"role": "assistant", "content": text})
    # Each later context extends the previous one by its action and the closing "\n".
    nl = enc(tok, "\n")
    for a, b in itertools.pairwise(records):
        prefix = [*a.context_ids.tolist(), *a.action_ids.tolist(), *nl]
        assert b.context_ids.tolist()[:len(prefix)] == prefix
    assert [r.step_index for r in records] == [0, 1, 2]
    assert [r.done for r in records] == [False, False, True]
    assert all(r.behavior_logprobs.tolist() == [-0.5] * len(r.action_ids) for r in records)


def test_chat_keeps_a_three_turn_tool_conversation_token_exact_qwen25(qwen_tok):
    call_1 = ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n'
              "</tool_call>")
    call_2 = ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "84+16"}}\n'
              "</tool_call>")
    turns = [
        ([{"role": "system", "content": "Use the calculator."},
          {"role": "user", "content": "What is 12*7, plus 16?"}], call_1),
        ([{"role": "tool", "content": "84"}], call_2),
        ([{"role": "tool", "content": "100"}], "The answer is 100."),
    ]
    engine, responses, records = asyncio.run(converse(qwen_tok, turns, CALCULATOR))
    # The first two answers came back as OpenAI tool calls, the third as text.
    for i, expression in ((0, "12*7"), (1, "84+16")):
        choice = responses[i]["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        (tc,) = choice["message"]["tool_calls"]
        assert tc["function"]["name"] == "calculator"
        assert json.loads(tc["function"]["arguments"]) == {"expression": expression}
        assert records[i].num_tool_calls == 1
    assert responses[2]["choices"][0]["message"]["content"] == "The answer is 100."
    # Every context equals the Qwen2.5 template over the whole conversation so far.
    conversation: list[dict[str, Any]] = []
    for i, (new, _) in enumerate(turns):
        conversation += new
        assert engine.calls[i][0] == whole(qwen_tok, conversation, CALCULATOR), i
        conversation.append(responses[i]["choices"][0]["message"])
        assert not responses[i]["agent_r1"]["diverged"]
    assert "# Tools" in qwen_tok.decode(engine.calls[0][0])
    assert qwen_tok.decode(engine.calls[2][0]).count("<tool_response>") == 2


def test_a_divergent_conversation_is_counted_and_starts_a_fresh_segment(tok):
    engine = FakeEngine.scripted([[*enc(tok, "Four."), IM_END], [*enc(tok, "Five."), IM_END],
                                  [*enc(tok, "Six."), IM_END]])
    service = make_service(engine, tok)
    session, _ = recorded_session(service)
    first = [{"role": "user", "content": "2+2?"}]

    async def run() -> list[dict[str, Any]]:
        out = []
        async with serving(service) as (endpoint, http):
            url = f"{endpoint.session_url(session.session_id)}/chat/completions"
            for messages in (
                first,
                # the client rewrote the answer it was given: not our tokens any more
                [*first, {"role": "assistant", "content": "4"}, {"role": "user", "content": "+1?"}],
                # the original answer, echoed exactly: extends the first segment
                [*first, {"role": "assistant", "content": "Four."},
                 {"role": "user", "content": "+2?"}],
            ):
                status, resp = await post(http, url, {"messages": messages})
                assert status == 200, resp
                out.append(resp["agent_r1"])
        return out

    ext = asyncio.run(run())
    assert [(e["segment"], e["diverged"]) for e in ext] == [(0, False), (1, True), (0, False)]
    assert session.segments.divergences == 1 and service.stats.divergences == 1
    edited = [*first, {"role": "assistant", "content": "4"}, {"role": "user", "content": "+1?"}]
    assert engine.calls[1][0] == whole(tok, edited)  # rendered at once, re-tokenized "4"
    first_ctx, first_action = engine.calls[0][0], [*enc(tok, "Four."), IM_END]
    assert engine.calls[1][0][:len(first_ctx) + len(first_action)] != [*first_ctx,
                                                                      *first_action]
    assert engine.calls[2][0][:len(first_ctx) + len(first_action)] == [*first_ctx,
                                                                      *first_action]


def test_sessions_are_named_by_path_header_or_user_and_unknown_ones_refused(tok):
    engine = FakeEngine.repeating([*enc(tok, "ok"), IM_END])
    service = make_service(engine, tok)
    session, _ = recorded_session(service, max_calls=None)
    chat = {"messages": [{"role": "user", "content": "hi"}]}

    async def run() -> list[tuple[int, Any]]:
        async with serving(service) as (endpoint, http):
            root = endpoint.url
            return [
                await post(http, f"{root}/v1/chat/completions", chat,
                           **{"X-Session-Id": session.session_id}),
                await post(http, f"{root}/v1/chat/completions", {**chat, "user": session.session_id}),
                await post(http, f"{root}/inference/v1/generate", {"token_ids": [5, 6]},
                           **{"X-Session-Id": session.session_id}),
                await post(http, f"{root}/v1/chat/completions", chat),  # no session: unrecorded
                await post(http, f"{root}/sessions/nope/v1/chat/completions", chat),
            ]

    (s1, r1), (s2, r2), (s3, r3), (s4, r4), (s5, r5) = asyncio.run(run())
    assert (s1, s2, s3, s4) == (200, 200, 200, 200)
    assert [r["agent_r1"]["step_index"] for r in (r1, r2, r3)] == [0, 1, 2]
    assert r4["agent_r1"]["session_id"] is None and r4["agent_r1"]["step_index"] is None
    assert s5 == 404 and r5["error"]["code"] == "unknown_session"
    assert service.stats.unrecorded == 1
    assert session.recorder.recorded == 3  # the unrecorded call is nobody's step


def test_a_call_into_an_ended_session_is_refused_and_not_recorded(tok):
    engine = FakeEngine.repeating([*enc(tok, "ok"), IM_END])
    service = make_service(engine, tok)
    session, _ = recorded_session(service)

    async def run() -> tuple[int, dict[str, Any]]:
        async with serving(service) as (endpoint, http):
            root = endpoint.session_url(session.session_id).removesuffix("/v1")
            url = f"{root}/inference/v1/generate"
            service.sessions.close(session)
            return await post(http, url, {"token_ids": [5, 6]})

    status, body = asyncio.run(run())
    assert status == 404 and body["error"]["code"] == "unknown_session"
    assert session.recorder.recorded == 0 and engine.calls == []


def test_sampling_that_would_change_the_distribution_is_refused_naming_the_key(tok):
    engine = FakeEngine.repeating([*enc(tok, "ok"), IM_END])
    service = make_service(engine, tok, temperature=1.0, max_new_tokens=8)

    async def run() -> list[tuple[int, dict[str, Any]]]:
        async with serving(service) as (endpoint, http):
            gen = f"{endpoint.url}/inference/v1/generate"
            chat = f"{endpoint.url}/v1/chat/completions"
            msgs = [{"role": "user", "content": "hi"}]
            return [
                await post(http, gen, {"token_ids": [5], "sampling_params": {"temperature": 0.7}}),
                await post(http, chat, {"messages": msgs, "n": 2}),
                await post(http, chat, {"messages": msgs, "stream": True}),
                await post(http, gen, {"token_ids": [len(tok)]}),
                await post(http, gen, {"token_ids": [5], "sampling_params": {
                    "temperature": 1.0, "max_tokens": 100, "seed": 3}}),
            ]

    (s1, b1), (s2, b2), (s3, b3), (s4, b4), (s5, _) = asyncio.run(run())
    assert s1 == 400 and b1["error"]["message"].startswith(
        "sampling_params.temperature=0.7: the actor samples at engine.temperature=1")
    assert s2 == 400 and b2["error"]["message"].startswith("n=2 is not supported")
    assert s3 == 400 and "stream" in b3["error"]["message"]
    assert s4 == 400 and f"0 <= id < {len(tok)}" in b4["error"]["message"]
    assert s5 == 200 and engine.calls == [([5], 8)]  # max_tokens capped by engine.max_new_tokens
    assert service.stats.refused == 4


def test_beyond_loopback_the_endpoint_checks_the_actors_token_and_refuses_no_auth(tok):
    engine = FakeEngine.repeating([*enc(tok, "ok"), IM_END])
    service = make_service(engine, tok)
    with pytest.raises(EndpointAuthError, match=r"endpoint.host '0.0.0.0' is beyond loopback, "
                                                r"so endpoint.auth must be token"):
        asyncio.run(Endpoint(service, "0.0.0.0", 0, None, "none").start())
    token = token_from_secret(b"a per-run secret")

    async def run() -> list[int]:
        async with serving(service, "0.0.0.0", token, key=None) as (endpoint, http):
            assert endpoint.token == token
            gen = f"{endpoint.url}/inference/v1/generate"
            body = {"token_ids": [5]}
            statuses = [(await post(http, gen, body))[0],
                        (await post(http, gen, body, Authorization="Bearer wrong"))[0],
                        (await post(http, gen, body, Authorization=f"Bearer {token}"))[0]]
            async with http.get(f"{endpoint.url}/health") as r:
                statuses.append(r.status)
            return statuses

    assert asyncio.run(run()) == [401, 401, 200, 200]
    assert len(engine.calls) == 1

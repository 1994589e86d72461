"""OpenAI `POST /v1/chat/completions`: the request as canonical messages, the response.

Canonical messages are what the chat template renders and what the session compares to
decide whether a conversation extends its token history (sessions.py):
`{"role", "content"}` with `content` a string (null is "", a list of text parts is joined;
other parts are refused), an assistant's `tool_calls` as `{"type": "function", "function":
{"name", "arguments"}}` with `arguments` an object (OpenAI sends a JSON string; chat templates
such as Qwen2.5's render an object, as vLLM does), and a tool message's `tool_call_id` and
`name`. Tool-call ids and other fields do not change what the model sees and are dropped.

Request: `messages`, `tools` (function schemas, rendered by the template or as a text block,
as in our rollouts), `tool_choice` (`auto` or `none`: the engine samples freely and cannot be
forced to call), `max_completion_tokens` / `max_tokens`, `temperature` / `top_p` / `stop` / ...
(params.py), `logprobs`, `user` (a session id; sessions.py), `stream` (must be false),
`response_format` (text only). The response is OpenAI's `chat.completion`, plus vLLM's
`prompt_token_ids` and `choices[0].token_ids`, and the `agent_r1` extension (calls.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_r1_async.actors.endpoint.calls import Call
from agent_r1_async.actors.endpoint.params import (
    ACCEPTED,
    NEUTRAL,
    Budget,
    EngineSampling,
    RequestError,
    check_fields,
    check_sampling,
)
from agent_r1_async.actors.endpoint.toolcalls import openai_tool_calls, split_tool_calls

ROLES = ("system", "developer", "user", "assistant", "tool")
CHAT_READ = frozenset({
    "messages", "tools", "tool_choice", "max_completion_tokens", "max_tokens", "temperature",
    "top_p", "stop", "logprobs", "user", "model", "stream", "response_format",
})
CHAT_ACCEPTED = frozenset({
    "top_logprobs", "seed", "stream_options", "parallel_tool_calls", "metadata", "store",
    "service_tier", "reasoning_effort", "verbosity", "prompt_cache_key", "safety_identifier",
    "include_reasoning", "return_tokens_as_token_ids", "return_token_ids",
    "return_token_offsets", "return_prompt_text", "request_id", "priority", "cache_salt",
    "kv_transfer_params", "ec_transfer_params", "add_special_tokens", "session_id",
    "truncation_side",
})
"""Chat fields OpenAI clients and vLLM's clients send that change nothing sampled: accepted
and unused (with the sampling fields of params.ACCEPTED)."""
CHAT_REFUSED = {
    "echo": (False,), "add_generation_prompt": (True,), "continue_final_message": (False,),
    "chat_template": (), "chat_template_kwargs": ({},), "documents": (),
    "mm_processor_kwargs": ({},), "media_io_kwargs": ({},), "mm_payload": (),
    "return_mm_kwargs": (False,), "functions": (), "function_call": (), "audio": (),
    "modalities": (["text"],), "prediction": (), "web_search_options": (),
}
"""Chat fields that would change how the conversation is rendered or what is returned: each
must be null or the value the endpoint serves (it renders with the actor's chat template)."""
CHAT_FIELDS = CHAT_READ | CHAT_ACCEPTED | ACCEPTED | NEUTRAL.keys() | CHAT_REFUSED.keys()


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    """Canonical messages (module docstring)."""
    tools: list[dict[str, Any]]
    parse_tools: bool
    """Tool-call blocks in the answer become `tool_calls` (tools offered, tool_choice not none)."""
    want_logprobs: bool
    model: str | None
    user: str | None
    budget: Budget

    @property
    def max_new_tokens(self) -> int:
        return self.budget.tokens


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(
                    part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise RequestError(f"{where}.content: a {kind!r} part is not served (text only)")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content: must be a string, null or a list of text parts")


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise RequestError(f"{where}.arguments: is not JSON") from None
    if not isinstance(value, dict):
        raise RequestError(f"{where}.arguments: must be a JSON object")
    return value


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise RequestError(f"{where}.tool_calls: must be a list")
    out = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RequestError(f"{where}.tool_calls[{j}]: needs function.name")
        out.append({"type": "function", "function": {
            "name": fn["name"], "arguments": _arguments(fn.get("arguments"),
                                                        f"{where}.tool_calls[{j}].function")}})
    return out


def canonical_message(msg: Any, where: str) -> dict[str, Any]:
    """One request message in the canonical form (module docstring)."""
    if not isinstance(msg, Mapping) or msg.get("role") not in ROLES:
        raise RequestError(f"{where}: must be an object with a role in {', '.join(ROLES)}")
    out: dict[str, Any] = {"role": msg["role"], "content": _text(msg.get("content"), where)}
    if msg["role"] == "assistant" and msg.get("tool_calls"):
        out["tool_calls"] = _tool_calls(msg["tool_calls"], where)
    if msg["role"] == "tool":
        for key in ("tool_call_id", "name"):
            if isinstance(msg.get(key), str):
                out[key] = msg[key]
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
            and isinstance(t["function"].get("name"), str) for t in value):
        raise RequestError("tools: must be a list of {\"type\": \"function\", \"function\": "
                           "{\"name\": ..., \"parameters\": ...}}")
    return [dict(t) for t in value]


def parse_chat(body: Mapping[str, Any], engine: EngineSampling) -> ChatRequest:
    """The request a body asks for; `RequestError` (400) names what is refused."""
    check_fields(body, CHAT_FIELDS, "")
    for key, served in CHAT_REFUSED.items():
        value = body.get(key)
        if value is not None and not any(type(value) is type(v) and value == v for v in served):
            allowed = " or ".join(["null", *(repr(v) for v in served)])
            raise RequestError(f"{key}={value!r} is not served: this endpoint renders the "
                               f"conversation with the actor's chat template ({allowed} only)")
    if body.get("stream"):
        raise RequestError("stream: true is not served; send stream: false")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, Mapping) or fmt.get("type") != "text"):
        raise RequestError("response_format: only {\"type\": \"text\"} is served (the engine "
                           "samples freely)")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise RequestError(f"tool_choice={choice!r}: only 'auto' and 'none' are served (the "
                           "engine samples freely and cannot be forced to call a tool)")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages: must be a non-empty list")
    messages = [canonical_message(m, f"messages[{i}]") for i, m in enumerate(raw)]
    tools = _tools(body.get("tools"))
    budget = check_sampling(body, engine, "", ("max_completion_tokens", "max_tokens"))
    user, model = body.get("user"), body.get("model")
    return ChatRequest(
        messages=messages, tools=tools, parse_tools=bool(tools) and choice != "none",
        want_logprobs=bool(body.get("logprobs")),
        model=model if isinstance(model, str) else None,
        user=user if isinstance(user, str) and user else None, budget=budget,
    )


@dataclass
class Answer:
    """The assistant's turn: canonical (for the session) and as the response shows it."""

    canonical: dict[str, Any]
    message: dict[str, Any]
    num_tool_calls: int


def answer(text: str, parse_tools: bool) -> Answer:
    """The assistant message for an action's decoded text."""
    content, calls = split_tool_calls(text) if parse_tools else (text, [])
    canonical: dict[str, Any] = {"role": "assistant", "content": content}
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        canonical["tool_calls"] = [{"type": "function", "function": {
            "name": c.name, "arguments": c.arguments}} for c in calls]
        message["tool_calls"] = openai_tool_calls(calls)
        message["content"] = content or None
    return Answer(canonical, message, len(calls))


def chat_response(req: ChatRequest, call: Call, ans: Answer, pieces: list[str],
                  model_name: str) -> dict[str, Any]:
    """OpenAI's `chat.completion` (`pieces`: each action token decoded, for `logprobs`)."""
    gen = call.gen
    finish = "tool_calls" if ans.num_tool_calls else gen.finish_reason
    logprobs: dict[str, Any] | None = None
    if req.want_logprobs:
        logprobs = {"content": [
            {"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": []}
            for p, lp in zip(pieces, gen.logprobs, strict=True)]}
    n_prompt, n_out = len(call.context_ids), len(gen.action_ids)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": req.model or model_name,
        "choices": [{"index": 0, "message": ans.message, "finish_reason": finish,
                     "logprobs": logprobs, "token_ids": list(gen.action_ids)}],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                  "total_tokens": n_prompt + n_out},
        "prompt_token_ids": list(call.context_ids),
        "agent_r1": {**call.extension(), **req.budget.note()},
    }

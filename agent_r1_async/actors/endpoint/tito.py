"""Token-in/token-out: vLLM's `POST /inference/v1/generate`, request and response shapes.

Request (vLLM 0.32's `GenerateRequest`, the fields read here): `token_ids` (the prompt, at
least one id, each in [0, vocabulary)), `sampling_params` (checked against the engine:
params.py; `logprobs` set asks for `choices[0].logprobs`), `request_id`, `model`,
`return_token_ids` (echo the prompt as `prompt_token_ids`), `stream` (must be false),
`output_mode` (`tokens` only), no multimodal `features` / `content_parts`.

Response (vLLM's `GenerateTokensResponse`): `request_id`, `model`, `created`, `output_mode`,
`usage`, `prompt_token_ids`, and one choice with `index`, `finish_reason`, `stop_reason`,
`token_ids`, `logprobs` (`{"content": [{"token_id", "logprob", "rank", "top_logprobs"}]}`, the
sampled token only) and `weight_versions` (vLLM's version spans). The `agent_r1` extension
field (calls.py) adds the policy version of every token and where the call was recorded.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_r1_async.actors.endpoint.calls import Call, version_spans
from agent_r1_async.actors.endpoint.params import (
    SAMPLING_FIELDS,
    Budget,
    EngineSampling,
    RequestError,
    check_fields,
    check_sampling,
)

GENERATE_FIELDS = frozenset({
    "token_ids", "sampling_params", "request_id", "model", "return_token_ids", "stream",
    "stream_options", "output_mode", "features", "content_parts", "cache_salt", "priority",
    "token_offsets", "kv_transfer_params", "ec_transfer_params", "reasoning_ended",
    "reasoning_parser_kwargs",
})
"""vLLM's `GenerateRequest` fields: the ones read here (module docstring), the rest accepted
and unused (they steer vLLM's scheduling and caching, not what is sampled). Any other field
is refused, naming it."""


@dataclass
class GenerateRequest:
    token_ids: list[int]
    request_id: str
    model: str | None
    want_logprobs: bool
    return_token_ids: bool
    budget: Budget

    @property
    def max_new_tokens(self) -> int:
        return self.budget.tokens


def _token_ids(value: Any, vocab_size: int, max_model_len: int) -> list[int]:
    """The prompt's ids; one too long for the model is passed on unchecked, for the service
    to refuse by its length alone (and cut its session) without reading every id."""
    if not isinstance(value, list) or not value:
        raise RequestError("token_ids: must be a non-empty list of token ids")
    if len(value) >= max_model_len:
        return value
    for t in value:
        if type(t) is not int or not 0 <= t < vocab_size:
            raise RequestError(f"token_ids: {t!r} is not a token id of this model "
                               f"(0 <= id < {vocab_size})")
    return list(value)


def parse_generate(body: Mapping[str, Any], engine: EngineSampling, vocab_size: int,
                   max_model_len: int) -> GenerateRequest:
    """The request a body asks for; `RequestError` (400) names what is refused."""
    check_fields(body, GENERATE_FIELDS, "")
    if body.get("stream"):
        raise RequestError("stream: true is not served; send stream: false")
    if body.get("output_mode", "tokens") != "tokens":
        raise RequestError(f"output_mode={body.get('output_mode')!r}: only 'tokens' is served "
                           "(the chat endpoint returns text)")
    for key in ("features", "content_parts"):
        if body.get(key):
            raise RequestError(f"{key}: multimodal inputs are not served")
    sampling = body.get("sampling_params") or {}
    budget = check_sampling(sampling, engine, "sampling_params.")
    check_fields(sampling, SAMPLING_FIELDS, "sampling_params.")
    request_id = body.get("request_id") or uuid.uuid4().hex
    model = body.get("model")
    return GenerateRequest(
        token_ids=_token_ids(body.get("token_ids"), vocab_size, max_model_len),
        budget=budget,
        request_id=str(request_id), model=model if isinstance(model, str) else None,
        want_logprobs=sampling.get("logprobs") is not None,
        return_token_ids=bool(body.get("return_token_ids")),
    )


def generate_response(req: GenerateRequest, call: Call, model_name: str) -> dict[str, Any]:
    gen = call.gen
    logprobs: dict[str, Any] | None = None
    if req.want_logprobs:
        logprobs = {"content": [
            {"token_id": t, "logprob": lp, "rank": None, "top_logprobs": []}
            for t, lp in zip(gen.action_ids, gen.logprobs, strict=True)]}
    n_prompt, n_out = len(call.context_ids), len(gen.action_ids)
    choice = {
        "index": 0, "finish_reason": gen.finish_reason, "stop_reason": None,
        "token_ids": list(gen.action_ids), "logprobs": logprobs,
        "weight_versions": version_spans(call.token_versions()),
    }
    return {
        "request_id": req.request_id, "model": req.model or model_name,
        "created": int(time.time()), "output_mode": "tokens",
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                  "total_tokens": n_prompt + n_out},
        "prompt_token_ids": list(call.context_ids) if req.return_token_ids else None,
        "choices": [choice],
        "agent_r1": {**call.extension(), **req.budget.note()},
    }

"""A request's sampling parameters, held against the actor's engine.

The endpoint serves the actor's engine exactly as the run configured it: the learner scores
every recorded action under the distribution the engine sampled from (`engine.temperature`,
`engine.top_p`: learner/logprobs.py), so a request may not change that distribution.

- `temperature`, `top_p`: absent, null, or the engine's value; anything else is refused.
- `stop`: absent, empty, or the engine's `engine.stop` list.
- Parameters that would reshape the distribution or the output (`n` > 1, `top_k`, `min_p`,
  penalties, `logit_bias`, `min_tokens`, `ignore_eos`, stop token ids, guided or structured
  decoding, prompt log-probs) are refused unless neutral.
- `max_tokens` (`max_completion_tokens` in chat) caps the action; it is itself capped by
  `engine.max_new_tokens` (the budget the run's memory was planned for), and absent it is
  that budget. A response states the budget its call ran under (`agent_r1.max_tokens`) and,
  when the request asked for more, what it asked (`agent_r1.max_tokens_requested`). The
  engine caps it again by the room left in `model.max_model_len`.
- The fields of `ACCEPTED` (`seed`, `logprobs`, `top_logprobs`, `detokenize`,
  `skip_special_tokens`, ...) are accepted and do not change what is sampled.
- Any other field is refused, naming it (and the field it may be a typo of): a setting the
  caller believes in and the endpoint ignores is worse than an error.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_r1_async.config import EngineConfig

NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "top_k": (-1, 0),
    "min_p": (0,),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "repetition_penalty": (1,),
    "logit_bias": ({},),
    "min_tokens": (0,),
    "ignore_eos": (False,),
    "stop_token_ids": ([],),
    "bad_words": ([],),
    "allowed_token_ids": (),
    "prompt_logprobs": (),
    "structured_outputs": (),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "truncate_prompt_tokens": (),
    "use_beam_search": (False,),
    "length_penalty": (1,),
    "logprob_token_ids": (),
    "prompt_logprob_token_ids": (),
    "thinking_token_budget": (),
    "watermarking": (),
    "repetition_detection": (),
    "extra_args": ({},),
    "vllm_xargs": ({},),
}
"""Parameters that must be null or one of these values (the engine cannot honour others)."""

SAMPLING_READ = frozenset({"temperature", "top_p", "stop", "max_tokens"})
ACCEPTED = frozenset({
    "seed", "logprobs", "top_logprobs", "detokenize", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "output_kind",
    "flat_logprobs", "stream_interval", "skip_reading_prefix_cache", "skip_clone",
    "routed_experts_prompt_start", "prompt_logprob_start", "trace_decode_token_ids",
})
"""Sampling fields accepted and unused: they shape the response, not what is sampled."""
SAMPLING_FIELDS = SAMPLING_READ | ACCEPTED | NEUTRAL.keys()
"""Every field of a token-in/token-out request's `sampling_params` (vLLM's SamplingParams)."""


class RequestError(Exception):
    """A request the endpoint refuses or cannot serve, as an HTTP error with one line."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.kind, self.code = message, status, kind, code


@dataclass(frozen=True)
class EngineSampling:
    """What the actor's engine samples with (from `engine.*`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, cfg: EngineConfig) -> EngineSampling:
        return cls(cfg.temperature, cfg.top_p, cfg.max_new_tokens, tuple(cfg.stop))


def check_fields(params: Mapping[str, Any], known: Iterable[str], prefix: str) -> None:
    """Refuse the first field of `params` not in `known`, naming it and its likely spelling."""
    known = frozenset(known)
    for key in params:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        raise RequestError(f"{prefix}{key}: unknown field{hint}; this endpoint refuses what it "
                           "would otherwise ignore", 400, "invalid_request_error",
                           "unknown_field")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_neutral(params: Mapping[str, Any], prefix: str) -> None:
    for key, neutral in NEUTRAL.items():
        value = params.get(key)
        if value is None or any(type(value) is not bool and value == n for n in neutral):
            continue
        allowed = " or ".join(["null", *(repr(n) for n in neutral)])
        raise RequestError(f"{prefix}{key}={value!r} is not supported: this endpoint samples "
                           f"exactly as the actor's engine is configured ({allowed} only)")


def _check_distribution(params: Mapping[str, Any], engine: EngineSampling, prefix: str) -> None:
    for key, want in (("temperature", engine.temperature), ("top_p", engine.top_p)):
        value = params.get(key)
        if value is None:
            continue
        if not _is_number(value) or abs(float(value) - want) > 1e-6:
            raise RequestError(
                f"{prefix}{key}={value!r}: the actor samples at engine.{key}={want:g} and the "
                f"learner scores the log-probs under it; omit {key} or send {want:g}")


def _check_stop(params: Mapping[str, Any], engine: EngineSampling, prefix: str) -> None:
    value = params.get("stop")
    if value in (None, "", []):
        return
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or stops != list(engine.stop):
        raise RequestError(f"{prefix}stop={value!r}: the actor's engine stops at engine.stop="
                           f"{list(engine.stop)!r} only; omit stop or send that list")


@dataclass(frozen=True)
class Budget:
    """The action's token budget, and what the request asked for when that was more."""

    tokens: int
    requested: int | None = None

    def note(self) -> dict[str, int]:
        """What a response states of it (`agent_r1.max_tokens`, `max_tokens_requested`)."""
        out = {"max_tokens": self.tokens}
        if self.requested is not None:
            out["max_tokens_requested"] = self.requested
        return out


def _budget(params: Mapping[str, Any], engine: EngineSampling, prefix: str,
            keys: Iterable[str]) -> Budget:
    for key in keys:
        value = params.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise RequestError(f"{prefix}{key}={value!r}: must be a whole number >= 1")
        if value > engine.max_new_tokens:
            return Budget(engine.max_new_tokens, value)
        return Budget(value)
    return Budget(engine.max_new_tokens)


def check_sampling(params: Mapping[str, Any], engine: EngineSampling, prefix: str = "",
                   budget_keys: Iterable[str] = ("max_tokens",)) -> Budget:
    """Refuse what the engine cannot honour (module docstring); the action's token budget."""
    if not isinstance(params, Mapping):
        raise RequestError(f"{prefix.rstrip('.') or 'the request'} must be a JSON object")
    _check_neutral(params, prefix)
    _check_distribution(params, engine, prefix)
    _check_stop(params, engine, prefix)
    return _budget(params, engine, prefix, budget_keys)

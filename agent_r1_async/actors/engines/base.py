"""The inference-engine seam: token ids in; sampled ids, behavior log-probs, versions out.

Design choices
- An engine serves many concurrent `generate` calls (one per running episode) and batches
  them itself: vLLM through its async engine's continuous batching, the transformers engine
  by collecting concurrent calls into one padded batch. Episodes never batch by hand.
- `GenResult.logprobs[i]` is the log-prob of `action_ids[i]` under the distribution the
  engine actually sampled from (temperature and top-p applied), so the learner's importance
  weights compare like with like. With temperature 1 and top-p 1 that is the policy itself.
- Versions: `policy_version` is the *oldest* weight version that produced any token of the
  action; `token_versions` is set (one per token) only when an action spans a weight update.
  An engine never reports a version newer than the one that produced a token.
- The eos token always ends an action and is kept in `action_ids` (its log-prob is the
  decision to stop). Extra stop strings end an action too (finish_reason "stop").

Build one with `agent_r1_async.actors.engines.make_engine(cfg, model_path)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent_r1_async.weights.seam import WeightTarget

if TYPE_CHECKING:

    from agent_r1_async.config import EngineConfig

FINISH_REASONS = ("stop", "length", "abort")


class EngineError(RuntimeError):
    """A generation request failed (its episode ends with status "engine_error")."""


@dataclass
class GenResult:
    """One sampled action."""

    action_ids: list[int]
    logprobs: list[float]
    """Behavior log-prob of each sampled token, same length as `action_ids`."""
    finish_reason: str
    """"stop" (eos or a stop string), "length" (token budget), "abort" (engine shut down)."""
    policy_version: int
    """Oldest weight version that produced a token of this action."""
    token_versions: list[int] = field(default_factory=list)
    """Per-token versions when the action spans a weight update; empty = all `policy_version`."""
    gen_time_s: float = 0.0
    """Wall time from request to result (queueing included)."""

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.action_ids):
            raise ValueError(
                f"GenResult: {len(self.logprobs)} logprobs for {len(self.action_ids)} tokens"
            )
        if self.token_versions and len(self.token_versions) != len(self.action_ids):
            raise ValueError(
                f"GenResult: {len(self.token_versions)} token_versions for "
                f"{len(self.action_ids)} tokens"
            )


def compact_versions(versions: list[int], fallback: int) -> tuple[int, list[int]]:
    """(policy_version, token_versions): the oldest version, and the list only if mixed."""
    if not versions:
        return fallback, []
    oldest = min(versions)
    return oldest, ([] if all(v == oldest for v in versions) else list(versions))


@runtime_checkable
class Engine(WeightTarget, Protocol):
    """What the actor needs from an inference engine: generation, and the weight seam's
    target (`version`, `load_weights`)."""

    async def generate(
        self, context_ids: list[int], max_new_tokens: int | None = None
    ) -> GenResult: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling knobs shared by both backends (from `engine.*`, validated by the config)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0

    @classmethod
    def from_config(
        cls, cfg: EngineConfig, seed: int = 0, temperature: float | None = None
    ) -> SamplingSettings:
        return cls(
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            stop=tuple(cfg.stop),
            seed=seed,
        )

    def budget(self, max_new_tokens: int | None, context_len: int, max_model_len: int) -> int:
        """Tokens a request may generate: its own budget, capped by the model length."""
        want = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        room = max_model_len - context_len
        if room < 1:
            raise EngineError(
                f"context of {context_len} tokens leaves no room in max_model_len {max_model_len}"
            )
        return max(1, min(want, room))

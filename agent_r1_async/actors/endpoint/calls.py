"""One generation call: the context the engine saw, what it sampled, and the token-level
record every response carries in its `agent_r1` extension field.

The record is the step as the learner will see it: `prompt_token_ids` (the step's context),
`token_ids` (the action, exactly as sampled), `logprobs` (each token's behavior log-prob under
the engine's sampling distribution, as `GenResult` gives it and the learner scores it),
`token_versions` (the policy version of every token) and `policy_version` (the oldest of
them), plus where the call landed: its session, episode, step index and chat segment, and
whether it started a new segment because the conversation diverged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_r1_async.actors.engines.base import GenResult


@dataclass
class Call:
    context_ids: list[int]
    gen: GenResult
    agent_s: float = 0.0
    """Seconds the agent spent between its previous call's answer (or the session's start)
    and this call: the black-box counterpart of an env step's time."""
    num_tool_calls: int = 0
    session_id: str | None = None
    episode_id: str | None = None
    step_index: int | None = None
    """Set when the call is recorded: its place among the episode's steps."""
    segment: int | None = None
    """Chat calls: the session's token history this call extended (or started)."""
    diverged: bool = False
    """Chat calls: the messages extended none of the session's histories, so this call
    started a new one (counted as a divergence)."""

    def token_versions(self) -> list[int]:
        """The policy version of every action token."""
        g = self.gen
        return list(g.token_versions) if g.token_versions else [g.policy_version] * len(
            g.action_ids)

    def extension(self) -> dict[str, Any]:
        """The `agent_r1` field of a response."""
        g = self.gen
        return {
            "prompt_token_ids": list(self.context_ids),
            "token_ids": list(g.action_ids),
            "logprobs": list(g.logprobs),
            "token_versions": self.token_versions(),
            "policy_version": g.policy_version,
            "finish_reason": g.finish_reason,
            "session_id": self.session_id,
            "episode_id": self.episode_id,
            "step_index": self.step_index,
            "segment": self.segment,
            "diverged": self.diverged,
        }


def version_spans(versions: list[int]) -> list[dict[str, Any]]:
    """vLLM's `weight_versions`: contiguous [start, end) spans of output tokens, each with the
    version (a string, as vLLM labels weights) that sampled them."""
    spans: list[dict[str, Any]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1]["version"] == str(v):
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": str(v), "start": i, "end": i + 1})
    return spans

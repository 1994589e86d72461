"""The agent contract: an env definition whose episodes an agent plays (blackbox.py,
verifiers/env.py) is an `AgentDefinition`; `run_agent` returns the reward (or an
`AgentOutcome`) or raises `AgentFailed`.

The actor's endpoint (actors/endpoint/episodes.py) plays such episodes; this module is the
contract alone (no engine, no HTTP server), so that env definitions never import the actor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent_r1_async.wire.messages import EpisodeStatus


class AgentFailed(Exception):
    """The agent's function failed: one line, the kind it is counted under
    (`env/errors/<kind>`), and the episode's status (`env_error` or `timeout`)."""

    def __init__(self, message: str, kind: str, status: EpisodeStatus = "env_error") -> None:
        super().__init__(message)
        self.message, self.kind, self.status = message, kind, status


@dataclass
class AgentOutcome:
    """An episode's reward with metrics of its own (logged as `env/<name>`, averaged by
    evaluations); `run_agent` may return this instead of a bare reward."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class AgentDefinition(Protocol):
    """An env definition whose episodes are an agent's calls on the actor's endpoint."""

    agent_name: str
    """The agent as errors name it (`module:function`)."""
    # Optional attribute `credential` (not a protocol member, so definitions without it
    # still match): which token `run_agent` is given as `api_key`
    # (actors/endpoint/episodes.py): "session" (the episode's own, the default), "actor"
    # (the actor's: a server of the actor's that plays every episode), "none" (the agent
    # takes no key).

    async def run_agent(self, task: Any, base_url: str, api_key: str,
                        session_id: str) -> float | AgentOutcome:
        """Run the agent on `task` against `base_url` (OpenAI clients: their base URL;
        `api_key` their bearer token); its reward (with metrics: `AgentOutcome`), or
        `AgentFailed`."""
        ...

"""The episode runner: what plays each episode of an actor's env (and of an evaluation's).

`open_runner` picks it from the env definition:
- an ordinary env: a `RolloutRunner`, our rollout (rollout.py) over the env's factory;
- an env definition that is an `AgentDefinition` (envs/agent.py: `blackbox`, `verifiers`): a
  `BlackboxRunner` (endpoint/episodes.py), with the actor's generation endpoint serving on
  the actor's loop.

Both have `run(task, ids, emit) -> EpisodeEnd` and `close()`, so the actor's groups
(`algorithm.group_size` concurrent episodes of one task) run either the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent_r1_async.actors.endpoint.episodes import open_blackbox_runner
from agent_r1_async.actors.rollout import Emit, EpisodeIds, Rollout
from agent_r1_async.config import RunConfig
from agent_r1_async.envs.agent import AgentDefinition
from agent_r1_async.envs.registry import EnvSpec
from agent_r1_async.wire.messages import EpisodeEnd


class EpisodeRunner(Protocol):
    """Plays one episode to its end, emitting its records; never raises for the env's, the
    agent's or the engine's failures."""

    async def run(self, task: Any, ids: EpisodeIds, emit: Emit) -> EpisodeEnd: ...

    async def close(self) -> None: ...


@dataclass
class RolloutRunner:
    """An ordinary env: our own rollout drives each episode."""

    rollout: Rollout
    make: Callable[[], Any]

    async def run(self, task: Any, ids: EpisodeIds, emit: Emit) -> EpisodeEnd:
        return await self.rollout.run(self.make, task, ids, emit)

    async def close(self) -> None:
        return None


async def open_runner(cfg: RunConfig, spec: EnvSpec, rollout: Rollout, transport: Any,
                      index: int) -> EpisodeRunner:
    """The runner of the episodes of `spec`'s env (module docstring); a black-box env's
    endpoint is serving when this returns (close it with `close()`)."""
    agent = spec.definition
    if not isinstance(agent, AgentDefinition):
        return RolloutRunner(rollout, spec.make)
    return await open_blackbox_runner(cfg, agent, rollout, transport, index)

"""The `verifiers` env: a verifiers v1 environment, served by verifiers' own EnvServer.

    env:
      name: verifiers
      max_turns: 3            # generation calls one episode may make (also the seat's max_turns)
      step_timeout_s: 60      # an episode's limit is step_timeout_s x max_turns unless timeout_s
      args:
        taskset: vf-arithmetic          # a taskset package the verifiers environment imports
        pythonpath: [examples]          # where it lives, if it is not installed there
        splits: {train: ":1000", dev: "1000:1100", test: "1100:"}

verifiers pins packages the trainer's environment cannot hold (`openai<3`, `mcp==2.0.0`), so
it runs from an environment of its own (`.venv-verifiers/`, made by `scripts/setup.sh`);
this process speaks its EnvServer protocol (wire/envserver.py) and imports nothing of it.

Each process that plays episodes (an actor, `eval`) starts one EnvServer for the taskset
(`bridge.py serve`, server.py) at its first episode. An episode is a black-box agent's
(actors/endpoint/episodes.py): the actor opens a session on its generation endpoint and sends
the server a `RunRequest` with the task's data and a client that points at that session's
OpenAI-compatible base URL. verifiers then runs its harness, whose model calls (through its
interception proxy) become the session's steps, token-exact with per-token policy versions;
it scores the trace with the taskset's rewards, and results.py turns the streamed traces into
the episode's reward and metrics. The tasks come from the taskset's own `load()`, read once
per process through the bridge and split by index ranges (`splits`).

A server that does not start, exits, or does not answer fails the episode in one line naming
it (and is started again at the next episode, `restarts` times); an episode past its timeout
is cancelled on the server. `eval` plays these episodes too; there is no oracle (no warm start).
"""

from __future__ import annotations

import json
from typing import Any

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.agent import AgentFailed, AgentOutcome
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.blackbox import EndpointEpisode, episode_timeout
from agent_r1_async.envs.host_loop import at_exit, on_host
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.verifiers.args import VerifiersArgs, parse_range
from agent_r1_async.envs.verifiers.results import outcome
from agent_r1_async.envs.verifiers.server import (
    TOKEN_VAR,
    ServerUnavailable,
    VerifiersServer,
    interpreter,
    load_tasks,
)
from agent_r1_async.wire.envserver import EnvServerError, EnvServerTimeout

MODEL_NAME = "policy"
"""The model name the server's client sends (the endpoint serves only the policy)."""


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False) if prompt is not None else ""


@register_env("verifiers")
class VerifiersEnv:
    """A verifiers v1 taskset and harness, trained through the actor's endpoint."""

    Args = VerifiersArgs
    credential = "actor"
    """The EnvServer plays every episode of this process, so it holds the actor's token (in
    its environment) and names each episode's session by its base URL
    (actors/endpoint/auth.py)."""

    def __init__(self, args: VerifiersArgs, env_cfg: EnvConfig) -> None:
        interpreter(args)  # a missing verifiers environment is a config error, at once
        self.args, self.env_cfg = args, env_cfg
        self.agent_name = f"verifiers taskset {args.taskset}"
        self.timeout_s, self._timeout_key = episode_timeout(args.timeout_s, env_cfg)
        self._all: list[dict[str, Any]] | None = None
        self._tasks: dict[str, list[Task]] = {}
        self._server: VerifiersServer | None = None

    def make(self) -> EndpointEpisode:
        return EndpointEpisode("verifiers", self.agent_name)

    def tasks(self, split: str) -> list[Task]:
        if split not in self.args.splits:
            raise ValueError(f"split {split!r}: env.args.splits names "
                             f"{', '.join(sorted(self.args.splits))}")
        if split not in self._tasks:
            if self._all is None:
                self._all = load_tasks(self.args, self.env_cfg.max_turns)
            rows = self._all[parse_range(self.args.splits[split])]
            self._tasks[split] = [
                Task(str(row.get("id") or f"{self.args.taskset}-{row.get('idx', i)}"),
                     _prompt_text(row.get("prompt")), None, {"task_data": row})
                for i, row in enumerate(rows)]
        return self._tasks[split]

    async def run_agent(self, task: Task, base_url: str, api_key: str | None,
                        session_id: str) -> AgentOutcome:
        """One served episode of `task` whose model calls land at `base_url`."""
        return await on_host(self._episode(task, base_url, api_key))

    async def _episode(self, task: Task, base_url: str, api_key: str | None) -> AgentOutcome:
        server = await self._up(api_key)
        payload = {
            "task_data": task.meta["task_data"],
            "client": {"type": "eval", "base_url": base_url, "api_key_var": TOKEN_VAR},
            "model": MODEL_NAME,
            "sampling": {},
        }
        try:
            deltas, reply = await server.run(payload, self.timeout_s)
        except ServerUnavailable as e:
            raise AgentFailed(str(e), "server_unavailable") from None
        except EnvServerTimeout:
            raise AgentFailed(f"{self.agent_name}: the episode took longer than "
                              f"{self.timeout_s:g} s ({self._timeout_key})", "timeout",
                              "timeout") from None
        except EnvServerError as e:
            raise AgentFailed(f"{server.label}: {e}", "wire") from None
        return outcome(deltas, reply)

    async def _up(self, api_key: str | None) -> VerifiersServer:
        if self._server is None:
            self._server = VerifiersServer(self.args, self.env_cfg.max_turns,
                                           self.args.max_concurrent)
            at_exit(self._server.aclose)
        try:
            await self._server.ensure_up(api_key)
        except ServerUnavailable as e:
            raise AgentFailed(str(e), "server_unavailable") from None
        return self._server

    async def aclose(self) -> None:
        """Stop this process's server (also done at process exit)."""
        if self._server is not None:
            await on_host(self._server.aclose())


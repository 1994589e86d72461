"""The `mcp_tools` env: a ToolEnv whose tools come from MCP servers named in `env.args`.

    env:
      name: mcp_tools
      args:
        servers: [{name: units, command: [python, examples/mcp_units_server.py]}]
        tasks: examples.mcp_units_server:tasks

The definition lists each server's tools once per process. A server that does not start or
list its tools is one line naming it (`unavailable`): `envs check` and the launch's preflight
fail with it, and in an actor (the server was lost after preflight) every episode fails with
it (`env_error`) while a background thread lists the tools again every `RELIST_S`, so the
actor lives and the launch's failing-episodes rule names the cause. Every episode gets fresh
`McpTool`s bound to its own leases; a server lost mid-episode (server.py) fails that episode
with `EnvError`, and the next episode connects again.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import host_loop
from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task, Tool
from agent_r1_async.envs.mcp.args import McpToolsArgs
from agent_r1_async.envs.mcp.server import McpServer
from agent_r1_async.envs.mcp.tools import EpisodeLeases, McpTool
from agent_r1_async.envs.registry import import_callable, register_env
from agent_r1_async.envs.rewards import exact_match
from agent_r1_async.envs.toolenv import Score, Shaping, ToolCall, ToolEnv, tool_call_text

DEFAULT_PROMPT = (
    "Solve the task with the tools. Call a tool like this:\n"
    '<tool_call>{{"name": "{tool}", "arguments": {{...}}}}</tool_call>\n'
    "Then give the final answer like this: <answer>ANSWER</answer>"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


RELIST_S = 10.0
"""An actor whose servers did not list their tools tries again this often."""


class McpServerUnavailable(ConfigError):
    """A server did not start or list its tools (one line naming the server)."""


class _Unlisted:
    """The env of an episode while a server has not listed its tools: its reset fails."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def reset(self, task: Task) -> Observation:
        raise EnvError(self.why)

    async def step(self, action: str) -> StepResult:
        raise EnvError(self.why)


class McpDomain:
    """The ToolDomain of one episode: its MCP tools, the prompt and the scoring."""

    def __init__(self, tools: list[McpTool], args: McpToolsArgs, prompt: str) -> None:
        self.tools: Sequence[Tool] = tools
        self.args, self.prompt = args, prompt

    def system_prompt(self) -> str:
        return self.prompt

    def score(self, task: Task, answer: str | None) -> Score:
        if self.args.score == "exact":
            ok = exact_match(answer, task.answer if isinstance(task.answer, str | list)
                             else str(task.answer))
        else:
            ok = float(numeric_match(answer, task.answer, self.args.rel_tol))
        return Score(ok, {"success": ok})


def numeric_match(answer: str | None, gold: Any, rel_tol: float) -> bool:
    """The first number in `answer` equals `gold` within `rel_tol` (commas ignored)."""
    m = _NUMBER.search((answer or "").replace(",", ""))
    if m is None:
        return False
    return math.isclose(float(m.group()), float(gold), rel_tol=rel_tol, abs_tol=1e-9)


class McpToolEnv(ToolEnv):
    """A ToolEnv whose episode holds MCP sessions: a lost server fails the episode, and the
    episode's own sessions end with it."""

    def __init__(self, domain: McpDomain, leases: EpisodeLeases, **kwargs: Any) -> None:
        super().__init__(domain, **kwargs)
        self.leases = leases
        leases.close_when_collected(self)

    async def reset(self, task: Task) -> Observation:
        await self.leases.close()  # a reused env starts with fresh sessions
        return await super().reset(task)

    async def step(self, action: str) -> StepResult:
        result = await super().step(action)
        failure = self.leases.failure
        if failure or result.done:
            await self.leases.close()
        if failure:
            self.done = True
            raise EnvError(failure)
        return result


def _task(item: Any, split: str, i: int) -> Task:
    if isinstance(item, Task):
        return item
    if not isinstance(item, dict) or "prompt" not in item:
        raise TypeError(f"tasks({split!r})[{i}] must be a Task or a dict with a 'prompt'")
    meta = dict(item.get("meta", {}))
    if "oracle" in item:
        meta["oracle"] = item["oracle"]
    return Task(str(item.get("id", f"{split}-{i}")), item["prompt"], item.get("answer"), meta)


@register_env("mcp_tools")
class McpToolsEnv:
    """Tools from MCP servers (stdio or streamable HTTP) on tasks from a Python function."""

    Args = McpToolsArgs

    def __init__(self, args: McpToolsArgs, env_cfg: EnvConfig) -> None:
        for s in args.servers:
            if s.timeout_s >= env_cfg.tool_timeout_s:
                raise ConfigError(
                    f"config key `env.args.servers`: {s.name!r} timeout_s ({s.timeout_s:g}) "
                    f"must be below env.tool_timeout_s ({env_cfg.tool_timeout_s:g})")
            if s.url:
                s.headers()  # a missing variable fails here, naming it
        self.args, self.env_cfg = args, env_cfg
        self.task_fn = import_callable(args.tasks, "tasks")
        self.servers = [McpServer(s) for s in args.servers]
        self.specs: list[tuple[McpServer, Any, str]] = []
        self.prompt = ""
        self.unavailable = ""
        """Why the tools are not listed ("" once they are): one line naming the server."""
        self.shaping = Shaping(valid_call=args.valid_call_reward,
                               invalid_call=args.invalid_call_penalty)
        self._tasks: dict[str, list[Task]] = {}
        self._relisting: threading.Thread | None = None
        self._last_try = time.monotonic()
        self._try_listing()

    def _list_all(self) -> None:
        """List every server's tools; the tools and the prompt change only when all list."""
        specs: list[tuple[McpServer, Any, str]] = []
        seen: dict[str, str] = {}
        for server in self.servers:
            for spec in self._list(server):
                name = server.args.prefix + spec.name
                if name in seen:
                    raise ConfigError(
                        f"config key `env.args.servers`: tool {name!r} is offered by both "
                        f"{seen[name]!r} and {server.args.name!r}; give one a `prefix`")
                seen[name] = server.args.name
                specs.append((server, spec, name))
        first = specs[0][2] if specs else "TOOL"
        self.prompt = self.args.system_prompt or DEFAULT_PROMPT.format(tool=first)
        self.specs = specs
        self.unavailable = ""

    def _try_listing(self) -> None:
        """`_list_all`, its failure kept as `unavailable` (in the constructor, and on the
        relisting thread)."""
        try:
            self._list_all()
        except McpServerUnavailable as e:
            self.unavailable = str(e)

    def _list(self, server: McpServer) -> list[Any]:
        a = server.args
        try:
            return host_loop.run_sync(server.list_tools(), a.connect_timeout_s + 5.0)
        except Exception as e:
            from agent_r1_async.envs.mcp.connection import describe

            msg = str(e) if str(e).startswith("MCP server") else (
                f"{server.label} did not list its tools: {describe(e)}")
            raise McpServerUnavailable(msg) from None

    def make(self) -> McpToolEnv | _Unlisted:
        why = self.unavailable
        if why:
            running = self._relisting is not None and self._relisting.is_alive()
            if not running and time.monotonic() - self._last_try >= RELIST_S:
                self._last_try = time.monotonic()
                self._relisting = threading.Thread(target=self._try_listing, daemon=True,
                                                   name="mcp-relist")
                self._relisting.start()
            return _Unlisted(why)
        leases = EpisodeLeases(self.servers)
        tools = [McpTool(server, spec, name, leases) for server, spec, name in self.specs]
        cfg = self.env_cfg
        return McpToolEnv(McpDomain(tools, self.args, self.prompt), leases,
                          max_turns=cfg.max_turns, tool_timeout_s=cfg.tool_timeout_s,
                          shaping=self.shaping)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = [_task(t, split, i) for i, t in enumerate(self.task_fn(split))]
        return self._tasks[split]

    def oracle(self, task: Task) -> list[str] | None:
        steps = task.meta.get("oracle")
        if steps is None:
            return None
        actions = [s if isinstance(s, str) else
                   tool_call_text(ToolCall(s["name"], dict(s.get("arguments", {}))))
                   for s in steps]
        return [*actions, f"<answer>{task.answer}</answer>"]

"""The `blackbox` env: an agent we did not write, trained through the actor's endpoint.

    env:
      name: blackbox
      max_turns: 4                  # generation calls one episode may make
      step_timeout_s: 30
      args:
        agent: examples.openai_agent:run      # run(task, base_url) -> reward
        tasks: examples.openai_agent:tasks    # tasks(split) -> list of Task (or dicts)
        agent_args: {}                        # more keyword arguments for run
        timeout_s: 0                          # 0: env.step_timeout_s x env.max_turns

The agent is any function `run(task, base_url, **kw) -> reward`, sync or async, with its own
control flow: it calls the model through an OpenAI client (or token-in/token-out) at
`base_url`, reads what it needs, and returns the episode's reward. It declares `api_key`:
the episode's own bearer token, which the endpoint requires on every call
(`endpoint.auth: token`, actors/endpoint/auth.py); an OpenAI client takes it as `api_key`,
and a program the agent starts takes it from its environment (`OPENAI_API_KEY`), never from
its command line. It may also declare `session_id` (for clients that send `X-Session-Id` or
`user` instead of using the base URL). `task` is the `Task` from
`tasks(split)` (id, prompt, answer, meta); a mapping with those keys works as a task too.

For each episode the actor opens a session on its endpoint, runs the function off its event
loop (envs/offload.py; a synchronous one on a thread of its own: a blocking function cannot
freeze the actor, and its blocking is not reported as a blocked loop), and records the
session's calls as the episode's steps; the reward becomes the outcome, checked like an env's
(a finite real number). `algorithm.group_size` episodes of one task run at once, each with a
session of its own. See actors/endpoint/episodes.py for how an episode ends.

The episodes exist only where an endpoint serves them (a launch's actors, `eval`): `make()`
gives an env whose `reset` explains that, so `envs check` fails in one line, and there is no
oracle (no warm start).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.agent import AgentFailed
from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task
from agent_r1_async.envs.contract import EnvContractError, real
from agent_r1_async.envs.offload import OffloadTimeout, run_offloaded
from agent_r1_async.envs.registry import import_callable, register_env

_OPTIONAL = ("api_key", "session_id")
"""Keywords the actor passes when the agent's function declares them."""


class BlackboxArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent: str
    """`module:function`: `run(task, base_url, **kw) -> reward`, sync or async."""
    tasks: str
    """`module:function`: `tasks(split) -> list` of `Task` (or mappings with task_id, prompt,
    answer, meta)."""
    agent_args: dict[str, Any] = {}
    """More keyword arguments for the agent's function (each one it must accept)."""
    timeout_s: float = 0.0
    """Longest an episode's agent may run (0 = env.step_timeout_s x env.max_turns)."""

    def __post_init__(self) -> None:
        for key in ("agent", "tasks"):
            module, _, attr = getattr(self, key).partition(":")
            if not module or not attr:
                raise ValueError(f"{key}: must be 'module:function', got {getattr(self, key)!r}")
        if self.timeout_s < 0:
            raise ValueError("timeout_s: must be >= 0 (0 = env.step_timeout_s x env.max_turns)")
        clash = [k for k in _OPTIONAL if k in self.agent_args]
        if clash:
            raise ValueError(f"agent_args: {clash[0]!r} is passed by the actor")


def episode_timeout(timeout_s: float, env_cfg: EnvConfig) -> tuple[float, str]:
    """(seconds an agent's episode may run, the config key that set it): `timeout_s` when
    given, else env.step_timeout_s x env.max_turns."""
    if timeout_s:
        return timeout_s, "env.args.timeout_s"
    return env_cfg.step_timeout_s * env_cfg.max_turns, "env.step_timeout_s x env.max_turns"


def _keywords(fn: Callable[..., Any], args: BlackboxArgs) -> tuple[str, ...]:
    """The optional keywords `fn` declares; ConfigError when it cannot take (task, base_url)
    or an `agent_args` key."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    optional: tuple[str, ...]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        optional = _OPTIONAL
    else:
        optional = tuple(k for k in _OPTIONAL if k in sig.parameters)
    keywords = [*args.agent_args, *optional]
    try:
        sig.bind(None, "", **dict.fromkeys(keywords))
    except TypeError as e:
        raise ConfigError(f"config key `env.args.agent`: {args.agent} cannot be called as "
                          f"run(task, base_url{''.join(f', {k}=...' for k in keywords)}): "
                          f"{e}") from None
    return optional


def _task(item: Any, where: str) -> Task:
    if isinstance(item, Task):
        return item
    if isinstance(item, Mapping):
        try:
            return Task(str(item["task_id"]), str(item["prompt"]), item.get("answer"),
                        dict(item.get("meta") or {}))
        except KeyError as e:
            raise ValueError(f"{where}: a task mapping needs {e.args[0]!r}") from None
    raise ValueError(f"{where}: returned a {type(item).__name__}, not a Task or a mapping")


class EndpointEpisode:
    """What `make()` gives for an env whose episodes an agent plays through a generation
    endpoint (blackbox, verifiers): our rollout cannot step it."""

    def __init__(self, env_name: str, agent_name: str) -> None:
        self.env_name, self.agent_name = env_name, agent_name

    def _refuse(self) -> EnvError:
        return EnvError(f"env {self.env_name!r} ({self.agent_name}) plays its episodes only "
                        "through a generation endpoint, driven by its agent (a launch's actors "
                        "and `eval` run them); `envs check` cannot step them")

    async def reset(self, task: Task) -> Observation:
        raise self._refuse()

    async def step(self, action: str) -> StepResult:
        raise self._refuse()


@register_env("blackbox")
class BlackboxEnv:
    """Agent code you did not write: run(task, base_url) -> reward, its model calls trained."""

    Args = BlackboxArgs

    def __init__(self, args: BlackboxArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg = args, env_cfg
        self.agent_name = args.agent
        self.fn = import_callable(args.agent, "agent")
        self.tasks_fn = import_callable(args.tasks, "tasks")
        self.optional = _keywords(self.fn, args)
        self.credential = "session" if "api_key" in self.optional else "none"
        """Which token its episodes get (actors/endpoint/episodes.py `credential`)."""
        self.timeout_s, self._timeout_key = episode_timeout(args.timeout_s, env_cfg)
        self._tasks: dict[str, list[Task]] = {}

    def make(self) -> EndpointEpisode:
        return EndpointEpisode("blackbox", self.agent_name)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            where = f"{self.args.tasks}({split!r})"
            items = self.tasks_fn(split)
            if not isinstance(items, list | tuple):
                raise ValueError(f"{where}: returned a {type(items).__name__}, not a list")
            self._tasks[split] = [_task(item, where) for item in items]
        return self._tasks[split]

    async def _call(self, task: Task, base_url: str, kwargs: dict[str, Any]) -> Any:
        """The agent's call, on the offloaded loop. A synchronous function runs on a thread of
        that loop: blocking is what it is expected to do, so its stretches are not reported
        as a blocked loop (an async function's still are)."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(task, base_url, **kwargs)
        result = await asyncio.to_thread(self.fn, task, base_url, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def run_agent(self, task: Task, base_url: str, api_key: str, session_id: str) -> float:
        """The agent's reward on `task` (`AgentFailed` naming the agent when it fails)."""
        given = {"api_key": api_key, "session_id": session_id}
        kwargs = {**self.args.agent_args, **{k: given[k] for k in self.optional}}
        name = f"agent {self.agent_name}"
        try:
            result = await run_offloaded(lambda: self._call(task, base_url, kwargs),
                                         self.timeout_s, name)
        except OffloadTimeout:
            raise AgentFailed(f"{name} took longer than {self.timeout_s:g} s "
                              f"({self._timeout_key})", "timeout", "timeout") from None
        except Exception as e:
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise AgentFailed(f"{name} raised {type(e).__name__}: {first}",
                              type(e).__name__) from e
        try:
            return real(result, name, "its return value")
        except EnvContractError as e:
            raise AgentFailed(str(e), e.kind) from None

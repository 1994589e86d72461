"""The `openenv` env: each episode is one episode of an OpenEnv Environment, played over a
WebSocket session of its own (see the package docstring for the config and the behaviour).

- reset(task): takes a session (pool.py) and sends reset with the task's seed or prompt and
  `reset_kwargs`; the observation's `observation_field` becomes the user message (after
  `system_prompt`, when set). When the session drops before the reset is answered, one new
  session is opened and the reset sent once more: no episode had begun on the old one.
- step(action): the action text, exactly as decoded, goes into `action_field` of the Action
  (with `action_extra`); the answer's `reward` is this step's reward and `done` ends the
  episode (`outcome` decides which reward is the outcome). A drop, a timeout or an error
  answer mid-episode fails the episode with one `EnvError` line naming the server: the
  Environment's state lived in that session and is not rebuilt by replaying actions.
- The episode's session goes back to the pool when the episode ends (done, failed, or the
  env is collected after a cut by `env.max_turns`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import weakref
from typing import Any

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import host_loop
from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task
from agent_r1_async.envs.contract import EnvContractError, flag, real
from agent_r1_async.envs.openenv.args import OpenEnvArgs
from agent_r1_async.envs.openenv.pool import Lease, SessionPool
from agent_r1_async.envs.openenv.server import OpenEnvServer, ServerUnavailable
from agent_r1_async.envs.openenv.session import (
    ServerError,
    SessionDropped,
    SessionError,
    SessionRefused,
    SessionTimeout,
    one_line,
)
from agent_r1_async.envs.registry import import_callable, register_env

CAPACITY_HINT = (
    "raise the server's max_concurrent_envs (create_app(..., max_concurrent_envs=N), with "
    "SUPPORTS_CONCURRENT_SESSIONS = True on its Environment) to at least the episodes in "
    "flight at once: actors.groups_in_flight x algorithm.group_size per process, summed over "
    "every process that shares the server")


class OpenEnvServerUnavailable(ConfigError):
    """The server did not start or cannot be reached (one line naming it)."""


class OpenEnvEpisode:
    """One episode's env (implements `Env`); its coroutines run on the host loop."""

    def __init__(self, definition: OpenEnvEnv) -> None:
        self.d = definition
        self.lease = Lease()
        self.steps = 0
        self.done = True
        self.rewards: list[float] = []
        fin = weakref.finalize(self, definition.pool.give_back_soon, self.lease)
        fin.atexit = False  # at exit the host closes every session itself

    @property
    def label(self) -> str:
        return self.d.server.label

    async def reset(self, task: Task) -> Observation:
        return await host_loop.on_host(self._reset(task))

    async def step(self, action: str) -> StepResult:
        return await host_loop.on_host(self._step(action))

    async def _reset(self, task: Task) -> Observation:
        pool, a = self.d.pool, self.d.args
        await pool.give_back(self.lease)  # a reused env: its previous episode is over
        self.steps, self.done, self.rewards = 0, False, []
        message = {"type": "reset", "data": self.d.reset_kwargs(task)}
        for attempt in (1, 2):
            try:
                self.lease.session = await pool.take()
            except ServerUnavailable as e:
                self.done = True
                raise EnvError(str(e)) from None
            try:
                data = await self.lease.session.request(message, a.timeout_s)
                break
            except SessionDropped as e:
                if attempt == 2:
                    raise await self._fail("reset", e) from None
                await pool.discard(self.lease.session)  # no episode began on it: try a new one
                self.lease.session = None
            except SessionError as e:
                raise await self._fail("reset", e) from None
        try:
            obs, _, done = self._parse(data, "reset")
            if done:
                raise EnvError(f"{self.label} reset: its answer says done=true")
            text = self._text(obs, "reset")
        except EnvError:
            await self._end()
            raise
        messages = [{"role": "system", "content": a.system_prompt}] if a.system_prompt else []
        messages.append({"role": "user", "content": text})
        return Observation(messages)

    async def _step(self, action: str) -> StepResult:
        if self.done or self.lease.session is None:
            raise EnvError(f"{self.label}: step without a running episode (reset first)")
        a = self.d.args
        self.steps += 1
        what = f"step {self.steps}"
        payload = {**a.action_extra, a.action_field: action}
        try:
            data = await self.lease.session.request({"type": "step", "data": payload},
                                                    a.timeout_s)
        except SessionError as e:
            raise await self._fail(what, e) from None
        try:
            obs, reward, done = self._parse(data, what)
            if done and a.outcome == "last" and data.get("reward") is None:
                raise EnvError(
                    f"{self.label} {what}: the final step's reward is the outcome "
                    "(env.args.outcome: last), and the server sent none (null; openenv-core's "
                    "server also writes a NaN reward as null): the episode is refused, not "
                    "scored 0")
            metrics = self._metrics(obs, what)
            text = "" if done else self._text(obs, what)
        except EnvError:
            await self._end()
            raise
        self.rewards.append(reward)
        if not done:
            process = reward if a.outcome == "last" else 0.0
            return StepResult(Observation([{"role": "user", "content": text}]), process, False,
                              metrics=metrics)
        await self._end()
        outcome = reward if a.outcome == "last" else sum(self.rewards)
        metrics["return"] = sum(self.rewards)
        return StepResult(Observation([]), 0.0, True, outcome_reward=outcome, metrics=metrics)

    async def _end(self) -> None:
        """The episode is over: its session goes back to the pool."""
        self.done = True
        await self.d.pool.give_back(self.lease)

    async def _fail(self, what: str, e: SessionError) -> EnvError:
        """End the episode; the error that says why, in one line naming the server."""
        self.done = True
        why = str(e)
        if isinstance(e, ServerError):
            why = f"it answered {what} with {e}"
            if e.code == "VALIDATION_ERROR" and what != "reset":
                why += (f" (the action goes into its Action as env.args.action_field="
                        f"{self.d.args.action_field!r}; its fields: GET /schema)")
        elif isinstance(e, SessionRefused):
            why = f"it refused a new session: {str(e).rstrip('.')}"
            if e.code == "CAPACITY_REACHED":
                why += f"; {CAPACITY_HINT}"
        elif isinstance(e, SessionTimeout):
            why = f"it did not answer {what} within timeout_s={self.d.args.timeout_s:g}"
        elif isinstance(e, SessionDropped):
            why = await self.d.server.exited(during=what)
            if not why:
                why = f"its WebSocket session dropped during {what}: {e}"
                if what != "reset":
                    why += ("; the episode's state lived in that session, so the episode "
                            "fails and the next one opens a new session")
        await self.d.pool.give_back(self.lease)  # a broken session is closed, not kept
        return EnvError(f"{self.label}: {why}")

    def _parse(self, data: dict[str, Any], what: str) -> tuple[dict[str, Any], float, bool]:
        method = f"{self.label} {what}"
        obs = data.get("observation")
        if not isinstance(obs, dict):
            raise EnvError(f"{method}: its answer has no observation object")
        raw = data.get("reward")
        reward = 0.0 if raw is None else real(raw, method, "reward")
        return obs, reward, flag(data.get("done", False), method, "done")

    def _text(self, obs: dict[str, Any], what: str) -> str:
        name = self.d.args.observation_field
        if name not in obs:
            raise EnvError(f"{self.label} {what}: its observation has no field {name!r} "
                           f"(env.args.observation_field); its fields: "
                           f"{', '.join(sorted(obs)) or '(none)'}")
        value = obs[name]
        text = value if isinstance(value, str) else json.dumps(value)
        cap = self.d.args.max_observation_chars
        if len(text) <= cap:
            return text
        return (f"{text[:cap]}\n[truncated by the OpenEnv client: {len(text) - cap} of "
                f"{len(text)} characters cut (server {self.d.args.name!r}, "
                f"max_observation_chars={cap})]")

    def _metrics(self, obs: dict[str, Any], what: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in self.d.args.metric_fields:
            if name not in obs:
                raise EnvError(f"{self.label} {what}: its observation has no field {name!r} "
                               "(env.args.metric_fields)")
            try:
                out[name] = real(obs[name], f"{self.label} {what}", f"observation[{name!r}]")
            except EnvContractError as e:
                raise EnvError(str(e)) from None
        return out


async def _close(pool: SessionPool, server: OpenEnvServer) -> None:
    await pool.close_all()
    await server.aclose()


def _first_line(e: BaseException) -> str:
    """An EnvError's first line as it is (it names the server, and may run past `one_line`'s
    200 characters); another exception's `one_line`."""
    if not isinstance(e, EnvError):
        return one_line(e)
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")


def _stop_in_background(server: OpenEnvServer) -> None:
    threading.Thread(target=server.stop, daemon=True, name="openenv-server-stop").start()


@register_env("openenv")
class OpenEnvEnv:
    """Environments of an OpenEnv server (a local command or a URL), one WebSocket session per episode."""

    Args = OpenEnvArgs

    def __init__(self, args: OpenEnvArgs, env_cfg: EnvConfig) -> None:
        for key in ("timeout_s", "connect_timeout_s"):
            value = getattr(args, key)
            if value >= env_cfg.step_timeout_s:
                raise ConfigError(f"config key `env.args.{key}`: {value:g} must be below "
                                  f"env.step_timeout_s ({env_cfg.step_timeout_s:g})")
        args.headers()  # a missing variable fails here, naming it
        self.args, self.env_cfg = args, env_cfg
        self.oracle_fn = import_callable(args.oracle, "oracle") if args.oracle else None
        self.server = OpenEnvServer(args)
        self.pool = SessionPool(self.server, args)
        budget = 2 * args.start_timeout_s + 3 * args.connect_timeout_s + 10.0
        try:
            host_loop.run_sync(self.server.start(), budget)
        except ServerUnavailable as e:
            self.server.stop()
            raise OpenEnvServerUnavailable(str(e)) from None
        except BaseException:
            self.server.stop()
            raise
        host_loop.at_exit(functools.partial(_close, self.pool, self.server))
        # A definition dropped before exit (a preflight's) stops its server with it.
        weakref.finalize(self, _stop_in_background, self.server).atexit = False
        self._tasks: dict[str, list[Task]] = {}

    def close(self) -> None:
        """Close every session and stop a started server now (at exit this happens anyway)."""
        host_loop.run_sync(_close(self.pool, self.server), 30.0)

    def make(self) -> OpenEnvEpisode:
        return OpenEnvEpisode(self)

    def probe_capacity(self, per_process: int, processes: int) -> int:
        """Hold as many sessions at once as the run's episodes in flight will, each reset on
        the first task of the first split, then close them; the count probed. A command server
        serves one process (`per_process` episodes: actors.groups_in_flight x
        algorithm.group_size); a URL server every process (x `processes`). ConfigError naming
        the keys when the server refuses one."""
        sessions = per_process * (1 if self.server.local else processes)
        task = self.tasks(next(iter(self.args.tasks)))[0]

        async def probe() -> BaseException | None:
            envs = [self.make() for _ in range(sessions)]
            try:
                results = await asyncio.gather(*(e.reset(task) for e in envs),
                                               return_exceptions=True)
            finally:
                await self.pool.close_all()  # held sessions would take the run's capacity
            return next((r for r in results if isinstance(r, BaseException)), None)

        budget = self.args.connect_timeout_s + 2 * self.args.timeout_s + 10.0
        err = host_loop.run_sync(probe(), budget)
        if err is not None:
            keys = ("actors.groups_in_flight x algorithm.group_size" if self.server.local else
                    "actors.num_actors x actors.groups_in_flight x algorithm.group_size")
            raise ConfigError(f"config key `actors.groups_in_flight`: {sessions} episodes at "
                              f"once ({keys}) need {sessions} sessions of the server, and "
                              f"{_first_line(err)}")
        return sessions

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = split_tasks(self.args, split)
        return self._tasks[split]

    def reset_kwargs(self, task: Task) -> dict[str, Any]:
        return reset_kwargs(self.args, task)

    def oracle(self, task: Task) -> list[str] | None:
        if self.oracle_fn is None:
            return None
        actions = self.oracle_fn(self.reset_kwargs(task))
        return None if actions is None else [str(x) for x in actions]


def split_tasks(args: OpenEnvArgs, split: str) -> list[Task]:
    """The tasks of a split: its seeds, then its prompts; each task's reset keywords are in
    `meta["reset"]`, and its `prompt` is only a label (the reset observation is the user
    message)."""
    if split not in args.tasks:
        raise ConfigError(f"config key `env.args.tasks`: no split {split!r} (splits: "
                          f"{', '.join(args.tasks)})")
    spec = args.tasks[split]
    out = [Task(f"{split}-seed-{s}", f"seed {s}", None, {"reset": {"seed": s}})
           for s in spec.all_seeds()]
    out += [Task(f"{split}-prompt-{i}", p, None, {"reset": {args.prompt_kwarg: p}})
            for i, p in enumerate(spec.prompts)]
    return out


def reset_kwargs(args: OpenEnvArgs, task: Task) -> dict[str, Any]:
    """The keywords of the reset that starts `task`: `reset_kwargs`, then the task's own."""
    return {**args.reset_kwargs, **task.meta.get("reset", {})}

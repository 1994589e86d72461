"""Env preflight: find a broken env before Ray starts, and `agent-r1-async envs check NAME`.

The first env a person writes is usually broken; inside a run its failures surface late (after
actor restarts) and far from the cause. Two levels:

- `preflight_env(env_cfg, splits, min_tasks)` (cheap: no model, no episode): import the
  definition, validate `env.args`, build it, list the tasks of each split the command uses,
  make one episode env. `launch`, `eval` and `sft` call it before anything heavy; a failure is
  an `EnvCheckError` (a `ConfigError`: the CLI prints it as one line) naming the env, the
  method and the exception.
- `check_env(env_cfg, splits, episodes)` (the `envs check` command): the same, then plays
  episodes with the env's oracle (when it has one) and one scripted junk action, timing
  `reset` and `step`, and returns the lines of a one-screen report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.base import Env, Observation, StepResult, Task
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.envs.registry import (
    EnvSpec,
    UnknownEnvError,
    import_env_modules,
    parse_args,
    resolve,
)

JUNK_ACTION = "I am not sure. Let me think about it some more."
"""An action with no tool call and no answer: every env must survive it."""


class EnvCheckError(ConfigError):
    """The env failed a preflight step; the message names the env, the method and the error."""


def _fail(name: str, method: str, e: BaseException) -> EnvCheckError:
    return EnvCheckError(f"env {name!r}: {method} failed: {type(e).__name__}: {e}")


def _call(name: str, method: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ConfigError:
        raise
    except Exception as e:
        raise _fail(name, method, e) from None


def resolve_env(env_cfg: EnvConfig) -> type:
    """The definition class of `env.name` (import errors and unknown names as ConfigError)."""
    import_env_modules(env_cfg)
    try:
        return resolve(env_cfg.name)
    except UnknownEnvError as e:
        raise ConfigError(f"env.name: {e}") from None
    except ConfigError:
        raise
    except Exception as e:  # the module imported but raised (e.g. an entry point's import)
        raise _fail(env_cfg.name, "import", e) from None


def check_args(env_cfg: EnvConfig) -> Any:
    """Import the env and validate `env.args` (errors name `env.args.<key>`)."""
    return parse_args(resolve_env(env_cfg), env_cfg.args)


def build_spec(env_cfg: EnvConfig) -> EnvSpec:
    cls = resolve_env(env_cfg)
    check_args(env_cfg)
    return _call(env_cfg.name, f"{cls.__name__}(args, env_cfg)",
                 lambda: EnvSpec(env_cfg.name, cls, env_cfg))


def split_tasks(spec: EnvSpec, split: str, min_tasks: int = 1) -> list[Task]:
    tasks = _call(spec.name, f"tasks({split!r})", lambda: spec.tasks(split))
    if not isinstance(tasks, list) or not all(isinstance(t, Task) for t in tasks):
        raise EnvCheckError(f"env {spec.name!r}: tasks({split!r}) must return a list of Task, "
                            f"got {type(tasks).__name__}")
    if len(tasks) < min_tasks:
        need = "at least one task" if min_tasks <= 1 else f"at least {min_tasks} tasks (one per actor)"
        raise EnvCheckError(f"env {spec.name!r}: tasks({split!r}) returned {len(tasks)} tasks; "
                            f"it needs {need}")
    return tasks


def preflight_env(env_cfg: EnvConfig, splits: dict[str, int]) -> EnvSpec:
    """The cheap checks; `splits` maps each split the command uses to its minimum task count."""
    spec = build_spec(env_cfg)
    for split, min_tasks in splits.items():
        split_tasks(spec, split, min_tasks)
    _call(spec.name, "make()", spec.make)
    return spec


# ---------------------------------------------------------------------------- full check


@dataclass
class EpisodeLog:
    """One checked episode: what happened and how long reset / each step took."""

    task_id: str
    actions: list[str]
    reset_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    result: StepResult | None = None
    error: str = ""


async def _episode(spec: EnvSpec, task: Task, actions: list[str], timeout_s: float) -> EpisodeLog:
    log = EpisodeLog(task.task_id, actions)
    method = "make()"
    try:
        env: Env = spec.make()
        method = "reset"
        t0 = time.perf_counter()
        obs = await run_offloaded(lambda: env.reset(task), timeout_s, f"{spec.name}.reset")
        log.reset_s = time.perf_counter() - t0
        if not isinstance(obs, Observation):
            raise TypeError(f"returned {type(obs).__name__}, not Observation")
        method = "step"
        for action in actions:
            t0 = time.perf_counter()
            res = await run_offloaded(lambda a=action: env.step(a), timeout_s, f"{spec.name}.step")
            log.step_s.append(time.perf_counter() - t0)
            if not isinstance(res, StepResult):
                raise TypeError(f"returned {type(res).__name__}, not StepResult")
            log.rewards.append(float(res.reward))
            log.result = res
            if res.done:
                break
    except Exception as e:
        log.error = f"{method} failed: {type(e).__name__}: {e}"
    return log


def _describe(kind: str, ep: EpisodeLog) -> str:
    if ep.error:
        return f"  {kind:7s} {ep.task_id}: FAILED in {ep.error}"
    r = ep.result
    steps = " ".join(f"{s * 1e3:.1f}" for s in ep.step_s)
    head = f"  {kind:7s} {ep.task_id}: reset {ep.reset_s * 1e3:.1f} ms, steps [{steps}] ms"
    if r is None:
        return head + ", no step"
    end = "done" if r.done else "not done"
    metrics = ", ".join(f"{k} {v:g}" for k, v in r.metrics.items())
    return (f"{head}, {end}, process {sum(ep.rewards):g}, outcome {r.outcome_reward:g}"
            + (f" ({metrics})" if metrics else ""))


def check_env(env_cfg: EnvConfig, splits: list[str], episodes: int = 1) -> tuple[bool, list[str]]:
    """Run every check; (all passed, report lines). Stops at the first cheap-check failure."""
    lines = [f"env {env_cfg.name}"]
    try:
        cls = resolve_env(env_cfg)
        lines.append(f"  import  {cls.__module__}:{cls.__qualname__}")
        args = check_args(env_cfg)
        lines.append(f"  args    {args!r}")
        t0 = time.perf_counter()
        spec = build_spec(env_cfg)
        lines.append(f"  build   {(time.perf_counter() - t0) * 1e3:.0f} ms")
        tasks = {s: split_tasks(spec, s) for s in splits}
        for s, ts in tasks.items():
            lines.append(f"  tasks   {s}: {len(ts)} (first: {ts[0].task_id}: {ts[0].prompt[:60]!r})")
    except ConfigError as e:
        return False, [*lines, f"  FAILED  {e}"]
    ok = True
    has_oracle = getattr(spec.definition, "oracle", None) is not None
    timeout = env_cfg.step_timeout_s
    for ts in tasks.values():
        for task in ts[:episodes]:
            if has_oracle:
                try:
                    actions = spec.oracle(task)
                except Exception as e:
                    ok = False
                    lines.append(f"  oracle  {task.task_id}: FAILED in oracle: {type(e).__name__}: {e}")
                    continue
                if actions:
                    ep = asyncio.run(_episode(spec, task, list(actions), timeout))
                    ok = ok and not ep.error and ep.result is not None and ep.result.done
                    lines.append(_describe("oracle", ep))
            junk = asyncio.run(_episode(spec, task, [JUNK_ACTION] * env_cfg.max_turns, timeout))
            ok = ok and not junk.error
            lines.append(_describe("junk", junk))
    if not has_oracle:
        lines.append("  oracle  (none: the definition has no oracle(task))")
    lines.append("OK" if ok else "FAILED")
    return ok, lines

"""The env preflight: a broken env found before Ray starts, and `agent-r1-async envs check NAME`.

The first env a person writes is usually broken; inside a run its failures surface late (after
actor restarts) and far from the cause. Two levels:

- `preflight_env(env_cfg, splits, min_tasks)` (cheap: no model, no episode): import the
  definition, validate `env.args`, build it, list the tasks of each split the command uses,
  make one episode env. `launch`, `eval` and `sft` call it before anything heavy; a failure is
  an `EnvCheckError` (a `ConfigError`: the CLI prints it as one line) naming the env, the
  method and the exception.
- `check_env(env_cfg, splits, episodes)` (the `envs check` command): the same, then plays
  episodes with the env's oracle (when it has one) and one scripted junk action, timing
  `reset` and `step`, and returns the lines of a one-screen report. It fails, one line each,
  when an env method raises or returns a value the rollout would refuse (envs/contract.py:
  a NaN or string reward, a `done` that is not a bool, a prompt with no room for an action in
  `model.max_model_len`: prompt_budget.py), when the oracle does not reach a positive outcome within
  `env.max_turns` actions, and when a split repeats a task id. It never raises on what an env
  returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.agent import AgentDefinition
from agent_r1_async.envs.base import Env, StepResult, Task
from agent_r1_async.envs.contract import (
    EnvContractError,
    check_observation,
    check_step_result,
    prompt_too_long,
    show,
)
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.envs.registry import (
    EnvSpec,
    UnknownEnvError,
    import_env_modules,
    parse_args,
    resolve,
)
from agent_r1_async.run.preflight.prompt_budget import PromptBudget, one_line

log = logging.getLogger(__name__)

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


def named_env(env_cfg: EnvConfig, name: str) -> EnvConfig:
    """The config's env section pointed at the env `name` (`envs check NAME`).

    When NAME is not the config's env, the section's `env.max_turns` was chosen for another
    env: it is raised to the definition's `suggested_max_turns(args)`, when it has one (a
    long-horizon env checked with the default config). An env that cannot be resolved is
    returned as named: `check_env` reports why."""
    if name == env_cfg.name:
        return env_cfg
    out = msgspec.structs.replace(env_cfg, name=name)
    try:
        suggest = getattr(resolve_env(out), "suggested_max_turns", None)
        turns = None if suggest is None else int(suggest(check_args(out)))
    except ConfigError:
        return out
    if turns is None or turns <= out.max_turns:
        return out
    return msgspec.structs.replace(out, max_turns=turns)


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
    bad = next((t for t in tasks if not isinstance(t.task_id, str) or not t.task_id), None)
    if bad is not None:  # it names the episode's records on the wire, which need a str
        raise EnvCheckError(f"env {spec.name!r}: tasks({split!r}) has a task whose task_id is "
                            f"{show(bad.task_id)}; a task_id must be a non-empty str")
    if len(tasks) < min_tasks:
        need = "at least one task" if min_tasks <= 1 else f"at least {min_tasks} tasks (one per actor)"
        raise EnvCheckError(f"env {spec.name!r}: tasks({split!r}) returned {len(tasks)} tasks; "
                            f"it needs {need}")
    return tasks


def preflight_env(env_cfg: EnvConfig, splits: dict[str, int]) -> EnvSpec:
    """The cheap checks; `splits` maps each split the command uses to its minimum task count.
    A definition that built without its server (`unavailable`: MCP) fails here, in its line."""
    spec = build_spec(env_cfg)
    unavailable = getattr(spec.definition, "unavailable", "")
    if unavailable:
        raise ConfigError(unavailable)
    for split, min_tasks in splits.items():
        repeated = repeated_ids(split_tasks(spec, split, min_tasks))
        if repeated:
            log.warning("env %r: %s", spec.name, _repeats(split, repeated))
    _call(spec.name, "make()", spec.make)
    return spec


# ---------------------------------------------------------------------------- full check


class _Failed(Exception):
    """An episode step that failed; the message is the report's reason."""


@dataclass
class EpisodeLog:
    """One checked episode: what happened and how long reset / each step took."""

    task_id: str
    actions: list[str]
    reset_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    result: StepResult | None = None
    """The last step's result, checked (envs/contract.py)."""
    prompt_tokens: int | None = None
    error: str = ""


async def _env_call(call: Callable[[], Any], timeout_s: float, method: str, name: str) -> Any:
    """One env call on a worker thread, as the rollout makes it; failures as `_Failed`."""
    try:
        return await run_offloaded(call, timeout_s, name)
    except TimeoutError:
        raise _Failed(f"{method} took longer than env.step_timeout_s={timeout_s:g}") from None
    except EnvContractError as e:  # a bad value inside the env, e.g. a ToolEnv hook's
        raise _Failed(f"{method}: {e}") from None
    except Exception as e:
        raise _Failed(f"{method} raised {one_line(e)}") from None


async def _episode(spec: EnvSpec, task: Task, actions: list[str], timeout_s: float,
                   prompt: PromptBudget | None = None) -> EpisodeLog:
    log = EpisodeLog(task.task_id, actions)
    try:
        try:
            env: Env = spec.make()
        except Exception as e:
            raise _Failed(f"make() raised {one_line(e)}") from None
        t0 = time.perf_counter()
        obs = await _env_call(lambda: env.reset(task), timeout_s, "env.reset", f"{spec.name}.reset")
        log.reset_s = time.perf_counter() - t0
        obs = check_observation(obs, "env.reset")
        if prompt is not None:
            try:
                log.prompt_tokens = n = prompt.tokens(obs)
            except Exception as e:
                raise _Failed(f"env.reset: its messages cannot be rendered with the chat "
                              f"template of {prompt.model!r}: {one_line(e)}") from None
            if n >= prompt.max_model_len:
                raise prompt_too_long(n, prompt.max_model_len, task.task_id)
        for action in actions:
            t0 = time.perf_counter()
            res = await _env_call(lambda a=action: env.step(a), timeout_s, "env.step",
                                  f"{spec.name}.step")
            log.step_s.append(time.perf_counter() - t0)
            res = check_step_result(res, "env.step")
            log.rewards.append(res.reward)
            log.result = res
            if res.done:
                break
    except (_Failed, EnvContractError) as e:
        log.error = str(e)
    return log


def oracle_verdict(ep: EpisodeLog, max_turns: int, planned: int) -> str:
    """Why an oracle episode does not pass ("" when it does): it must end within
    `env.max_turns` actions with a positive outcome."""
    r = ep.result
    if ep.error:
        return ep.error
    if r is None or not r.done:
        if planned > max_turns:
            return (f"not done after env.max_turns={max_turns} actions (the oracle has "
                    f"{planned}); the run would cut the episode there with outcome 0")
        return f"not done after the oracle's {planned} actions"
    if r.outcome_reward <= 0:
        return (f"the oracle's outcome is {r.outcome_reward:g}"
                f"{' (truncated)' if r.truncated else ''}; it must be positive")
    return ""


def _describe(kind: str, ep: EpisodeLog, verdict: str = "") -> str:
    if ep.error:
        return f"  {kind:7s} {ep.task_id}: FAILED: {ep.error}"
    r = ep.result
    steps = " ".join(f"{s * 1e3:.1f}" for s in ep.step_s)
    head = f"  {kind:7s} {ep.task_id}: reset {ep.reset_s * 1e3:.1f} ms, steps [{steps}] ms"
    failed = f"; FAILED: {verdict}" if verdict else ""
    if r is None:
        return head + ", no step" + failed
    end = "done" if r.done else "not done"
    metrics = ", ".join(f"{k} {v:g}" for k, v in r.metrics.items())
    return (f"{head}, {end}, process {sum(ep.rewards):g}, outcome {r.outcome_reward:g}"
            + (f" ({metrics})" if metrics else "") + failed)


def repeated_ids(tasks: list[Task]) -> list[tuple[str, int]]:
    """(task id, count) of every id that more than one task of a split has."""
    counts = Counter(t.task_id for t in tasks)
    return [(task_id, n) for task_id, n in counts.items() if n > 1]


def _repeats(split: str, repeated: list[tuple[str, int]]) -> str:
    task_id, n = repeated[0]
    more = f" and {len(repeated) - 1} more ids" if len(repeated) > 1 else ""
    return (f"tasks({split!r}): task id {task_id!r} appears {n} times{more}; "
            "each task needs its own id")


def check_env(env_cfg: EnvConfig, splits: list[str], episodes: int = 1,
              prompt: PromptBudget | None = None, prompt_note: str = "",
              sessions: tuple[int, int] | None = None) -> tuple[bool, list[str]]:
    """Run every check; (all passed, report lines). Stops at the first cheap-check failure.

    `prompt`: the policy's budget for the prompt's length (checked at every reset); without
    it, `prompt_note` says why the length was not checked. `sessions`: (episodes in flight
    per process, processes) of the run, for an env whose server holds a session per episode
    (`probe_capacity`: OpenEnv)."""
    lines = [f"env {env_cfg.name}"]
    try:
        cls = resolve_env(env_cfg)
        lines.append(f"  import  {cls.__module__}:{cls.__qualname__}")
        args = check_args(env_cfg)
        lines.append(f"  args    {args!r}")
        t0 = time.perf_counter()
        spec = build_spec(env_cfg)
        lines.append(f"  build   {(time.perf_counter() - t0) * 1e3:.0f} ms")
        unavailable = getattr(spec.definition, "unavailable", "")
        if unavailable:
            raise ConfigError(unavailable)
        tasks = {s: split_tasks(spec, s) for s in splits}
        for s, ts in tasks.items():
            first = ts[0].prompt
            shown = repr(first[:60]) if isinstance(first, str) else show(first)
            lines.append(f"  tasks   {s}: {len(ts)} (first: {ts[0].task_id}: {shown})")
        probe = getattr(spec.definition, "probe_capacity", None)
        if probe is not None and sessions is not None:
            lines.append(f"  capacity  {probe(*sessions)} sessions at once")
    except ConfigError as e:
        return False, [*lines, f"  FAILED  {e}"]
    ok = True
    for s, ts in tasks.items():
        repeated = repeated_ids(ts)
        if repeated:
            ok = False
            lines.append(f"  FAILED  {_repeats(s, repeated)}")
    has_oracle = getattr(spec.definition, "oracle", None) is not None
    if isinstance(spec.definition, AgentDefinition):  # blackbox, verifiers
        lines += ["  episodes  not stepped here: its agent plays them through a generation "
                  "endpoint (`eval` plays them with a model)",
                  "  prompt  length not checked: the agent writes its own prompts",
                  "OK" if ok else "FAILED"]
        return ok, lines
    timeout, max_turns = env_cfg.step_timeout_s, env_cfg.max_turns
    longest: tuple[int, str] = (-1, "")
    for ts in tasks.values():
        for task in ts[:episodes]:
            played: list[EpisodeLog] = []
            if has_oracle:
                try:
                    actions = spec.oracle(task)
                except Exception as e:
                    ok = False
                    lines.append(f"  oracle  {task.task_id}: FAILED: oracle(task) raised "
                                 f"{one_line(e)}")
                    actions = None
                if actions:
                    actions = list(actions)
                    ep = asyncio.run(_episode(spec, task, actions[:max_turns], timeout, prompt))
                    verdict = oracle_verdict(ep, max_turns, len(actions))
                    ok = ok and not verdict
                    lines.append(_describe("oracle", ep, verdict if not ep.error else ""))
                    played.append(ep)
                elif actions is not None:
                    lines.append(f"  oracle  {task.task_id}: no actions for this task")
            junk = asyncio.run(_episode(spec, task, [JUNK_ACTION] * max_turns, timeout, prompt))
            ok = ok and not junk.error
            lines.append(_describe("junk", junk))
            played.append(junk)
            for ep in played:
                if ep.prompt_tokens is not None and ep.prompt_tokens > longest[0]:
                    longest = (ep.prompt_tokens, ep.task_id)
    if not has_oracle:
        lines.append("  oracle  (none: the definition has no oracle(task))")
    if prompt is None:
        lines.append(f"  prompt  length not checked: {prompt_note or 'no model given'}")
    elif longest[0] >= 0:
        lines.append(f"  prompt  longest {longest[0]} tokens (task {longest[1]}) of "
                     f"model.max_model_len={prompt.max_model_len} ({prompt.model})")
    lines.append("OK" if ok else "FAILED")
    return ok, lines

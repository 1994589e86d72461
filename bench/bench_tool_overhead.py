"""Per-call overhead of tools and envs from elsewhere (MCP, OpenEnv) against native ones.

    .venv/bin/python -m bench.bench_tool_overhead                      # ~1 minute on 2 cores
    .venv/bin/python -m bench.bench_tool_overhead --rounds 3 --calls 100 --paths mcp

Both foreign paths are built as a run builds them: the env definition from the config's `env`
section (`get_env_spec`, configs/mcp_example.yaml and configs/openenv_example.yaml by
default), which starts the example server as a child process on this machine.

- MCP: one call of the units server's `convert` tool over stdio (examples/mcp_units_server.py,
  one shared session per process, as the config says), through an episode's `McpTool`
  (`spec.make().tools["convert"]`), executed as a ToolEnv executes a call:
  `ToolEnv._run_one` (on a worker thread under `run_offloaded`, `tool_timeout_s`, the result
  formatted). Baseline: a native `Tool` in this file doing the same conversion in-process
  (`convert_value` of the example; same schema, same arguments, same result text), run by
  `_run_one` of a plain ToolEnv. The arguments are those of the train tasks' oracle calls.
- OpenEnv: one `step` of the guess server (examples/openenv_guess_server.py, a WebSocket
  session per episode as `OpenEnvEpisode` plays it; an ended episode's session goes back to
  the pool for a later reset, as in a run), called as the actor calls an env
  (`run_offloaded(lambda: env.step(action), env.step_timeout_s, ...)`); each episode is a fresh
  `spec.make()`, `reset` (timed apart) then the oracle's binary-search guesses until done.
  Baseline: an in-process Env playing the example's own stdlib `Game` with the same messages,
  rewards and metrics. Before timing, both sides play the first tasks and must agree exactly
  (MCP: the same text for every argument set; OpenEnv: equal Observations and StepResults).

Each path runs at every `--concurrency` c: c calls (episodes) at once under `asyncio.gather`,
each call timed on its own. `--rounds` rounds of `--calls` calls per side and c, interleaved
(native and foreign alternate which goes first each round) after a short warm-up. Printed
per path and c: the calls timed, the median and p90 latency over every round's calls, and
foreign/native as the mean ± 95 % t interval (bench/stats.py) of the per-round ratio of
medians, with the extra µs per call (median difference, same interval). Everything,
the servers included, shares this machine's cores: the load is printed at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from agent_r1_async.config import load_config
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.envs.registry import EnvSpec, get_env_spec
from agent_r1_async.envs.toolenv import CallOutcome, Score, ToolCall, ToolEnv
from bench.stats import load_line, mean_ci
from examples.mcp_units_server import convert_value
from examples.openenv_guess_server import Game, secret_for

PATHS = ("mcp", "openenv")


# --------------------------------------------------------------------------------------
# Native baselines
# --------------------------------------------------------------------------------------


class NativeConvert:
    """The units server's `convert` as a native `Tool`: same schema, same result text."""

    name = "convert"
    description = "Convert a value between units of the same dimension (length, mass, time)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "required": ["value", "from_unit", "to_unit"],
        "properties": {"value": {"type": "number"}, "from_unit": {"type": "string"},
                       "to_unit": {"type": "string"}},
    }

    async def call(self, value: float, from_unit: str, to_unit: str) -> str:
        # The server validates `value` as a float and its SDK answers str(result).
        return str(convert_value(float(value), from_unit, to_unit))


class _NativeDomain:
    """A ToolDomain holding only the native tool (scoring is never reached here)."""

    def __init__(self) -> None:
        self.tools = [NativeConvert()]

    def system_prompt(self) -> str:
        return ""

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(0.0)


class NativeGuessEnv:
    """The guess game in-process, answering as `OpenEnvEpisode` answers for the example
    server (system prompt, observation text, `outcome` rule, `solved` and `return`)."""

    def __init__(self, system_prompt: str, outcome: str) -> None:
        self.system_prompt, self.outcome = system_prompt, outcome
        self.game: Game | None = None
        self.rewards: list[float] = []

    async def reset(self, task: Task) -> Observation:
        self.game, self.rewards = Game(secret_for(task.meta["reset"].get("seed"))), []
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": self.game.intro()})
        return Observation(messages)

    async def step(self, action: str) -> StepResult:
        assert self.game is not None
        text, reward, done = self.game.play(action)
        self.rewards.append(reward)
        metrics = {"solved": float(self.game.solved)}
        if not done:
            process = reward if self.outcome == "last" else 0.0
            return StepResult(Observation([{"role": "user", "content": text}]), process, False,
                              metrics=metrics)
        outcome = reward if self.outcome == "last" else sum(self.rewards)
        metrics["return"] = sum(self.rewards)
        return StepResult(Observation([]), 0.0, True, outcome_reward=outcome, metrics=metrics)


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (inclusive method: within the data's range)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out


class McpSide:
    """Tool calls through a ToolEnv's call execution (`_run_one`), foreign or native."""

    def __init__(self, env: ToolEnv, arg_sets: list[dict[str, Any]]) -> None:
        self.env, self.arg_sets, self.i = env, arg_sets, 0

    async def one(self, args: dict[str, Any]) -> str:
        outcome = CallOutcome(ToolCall("convert", args), "")
        await self.env._run_one(outcome)  # exactly how ToolEnv.step runs each valid call
        if outcome.error:
            raise RuntimeError(f"convert{args} failed: {outcome.content}")
        return outcome.content

    async def round(self, calls: int, conc: int) -> dict[str, list[float]]:
        lat: list[float] = []
        while len(lat) < calls:
            batch = []
            for _ in range(min(conc, calls - len(lat))):
                args = self.arg_sets[self.i % len(self.arg_sets)]
                self.i += 1
                batch.append(_timed(lambda a=args: self.one(a)))
            lat += [dt for dt, _ in await asyncio.gather(*batch)]
        return {"call": lat}


class GuessSide:
    """Episodes of the guess game played as the actor plays an env, foreign or native."""

    def __init__(self, make: Callable[[], Any], tasks: list[Task], oracle: Callable[[Task], Any],
                 timeout_s: float) -> None:
        self.make, self.tasks, self.oracle, self.timeout_s = make, tasks, oracle, timeout_s
        self.i = 0

    async def _call(self, fn: Callable[[], Awaitable[Any]], what: str) -> Any:
        return await run_offloaded(fn, self.timeout_s, what)  # as rollout's `_env_call`

    async def episode(self, task: Task, steps: list[float] | None = None,
                      resets: list[float] | None = None) -> list[Any]:
        """Play `task` with the oracle's actions; the reset's and every step's results."""
        env = self.make()
        name = type(env).__name__
        dt, obs = await _timed(lambda: self._call(lambda: env.reset(task), f"{name}.reset"))
        if resets is not None:
            resets.append(dt)
        out: list[Any] = [obs]
        for action in self.oracle(task):
            dt, res = await _timed(
                lambda a=action: self._call(lambda: env.step(a), f"{name}.step"))
            if steps is not None:
                steps.append(dt)
            out.append(res)
            if res.done:
                break
        return out

    async def round(self, calls: int, conc: int) -> dict[str, list[float]]:
        steps: list[float] = []
        resets: list[float] = []

        async def lane() -> None:
            while len(steps) < calls:
                task = self.tasks[self.i % len(self.tasks)]
                self.i += 1
                await self.episode(task, steps, resets)

        await asyncio.gather(*(lane() for _ in range(conc)))
        return {"step": steps, "reset": resets}


# --------------------------------------------------------------------------------------
# Building both sides of each path
# --------------------------------------------------------------------------------------


def _spec(config: str) -> tuple[EnvSpec, float, Any]:
    cfg = load_config(config)
    t0 = time.perf_counter()
    spec = get_env_spec(cfg.env)  # starts the server, lists / checks it
    return spec, time.perf_counter() - t0, cfg.env


async def build_mcp(config: str) -> tuple[McpSide, McpSide, str]:
    spec, built_s, env_cfg = await asyncio.to_thread(_spec, config)
    foreign_env = spec.make()  # one episode's McpToolEnv; its tools are McpTools
    native_env = ToolEnv(_NativeDomain(), max_turns=env_cfg.max_turns,
                         tool_timeout_s=env_cfg.tool_timeout_s)
    arg_sets = [dict(step["arguments"]) for t in spec.tasks("train")
                for step in t.meta["oracle"] if isinstance(step, dict)]
    foreign, native = McpSide(foreign_env, arg_sets), McpSide(native_env, arg_sets)
    t0 = time.perf_counter()
    await foreign.one(arg_sets[0])  # opens the shared session
    first_s = time.perf_counter() - t0
    for args in arg_sets:  # the same text for every argument set, or no timing at all
        a, b = await foreign.one(args), await native.one(args)
        if a != b:
            raise SystemExit(f"MCP and native disagree on convert{args}: {a!r} != {b!r}")
    note = (f"MCP: definition built in {built_s:.2f} s (server start, list_tools), first call "
            f"{first_s * 1e3:.0f} ms (opens the shared session); {len(arg_sets)} argument sets "
            "agree with the native tool")
    return foreign, native, note


async def build_openenv(config: str) -> tuple[GuessSide, GuessSide, str]:
    spec, built_s, env_cfg = await asyncio.to_thread(_spec, config)
    args = spec.args
    if args.metric_fields != ["solved"]:
        raise SystemExit(f"{config}: the native guess env mirrors metric_fields [solved], "
                         f"not {args.metric_fields}")
    tasks = spec.tasks("train")
    foreign = GuessSide(spec.make, tasks, spec.oracle, env_cfg.step_timeout_s)
    native = GuessSide(lambda: NativeGuessEnv(args.system_prompt, args.outcome), tasks,
                       spec.oracle, env_cfg.step_timeout_s)
    checked = 16
    for task in tasks[:checked]:
        a, b = await foreign.episode(task), await native.episode(task)
        if a != b:
            raise SystemExit(f"OpenEnv and native disagree on {task.task_id}:\n{a}\n{b}")
    note = (f"OpenEnv: definition built in {built_s:.2f} s (server start, /health, /schema); "
            f"{checked} episodes agree with the native game step for step")
    return foreign, native, note


# --------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------


def summarize(foreign: list[list[float]], native: list[list[float]]) -> dict[str, float]:
    """Per-round latency lists (s) of both sides -> pooled median / p90 (µs) of each, and
    the mean ± half-width over rounds of foreign/native (ratio of medians) and of the
    difference of medians (µs)."""
    ratios = [statistics.median(f) / statistics.median(n)
              for f, n in zip(foreign, native, strict=True)]
    extra = [(statistics.median(f) - statistics.median(n)) * 1e6
             for f, n in zip(foreign, native, strict=True)]
    fa = [x for r in foreign for x in r]
    na = [x for r in native for x in r]
    ratio, ratio_h = mean_ci(ratios)
    ex, ex_h = mean_ci(extra)
    return {"f_n": len(fa), "f_med": statistics.median(fa) * 1e6, "f_p90": p90(fa) * 1e6,
            "n_n": len(na), "n_med": statistics.median(na) * 1e6, "n_p90": p90(na) * 1e6,
            "ratio": ratio, "ratio_h": ratio_h, "extra": ex, "extra_h": ex_h}


def _pm(m: float, h: float, digits: int) -> str:
    return f"{m:.{digits}f} ± {'n/a' if math.isnan(h) else f'{h:.{digits}f}'}"


async def run(args: argparse.Namespace, load0: str) -> None:
    builders = {"mcp": lambda: build_mcp(args.mcp_config),
                "openenv": lambda: build_openenv(args.openenv_config)}
    sides: dict[str, tuple[Any, Any]] = {}
    notes = []
    for path in args.paths:
        foreign, native, note = await builders[path]()
        sides[path], notes = (foreign, native), [*notes, note]
    # (path, c, side) -> kind -> per-round latency lists
    res: dict[tuple[str, int, str], dict[str, list[list[float]]]] = {}
    for foreign, native in sides.values():  # warm-up: threads, sessions, caches
        for c in args.concurrency:
            await foreign.round(max(c, args.calls // 5), c)
            await native.round(max(c, args.calls // 5), c)
    for r in range(args.rounds):
        for path, (foreign, native) in sides.items():
            for c in args.concurrency:
                order = [("native", native), ("foreign", foreign)]
                for side, obj in order if r % 2 == 0 else order[::-1]:
                    for kind, lat in (await obj.round(args.calls, c)).items():
                        res.setdefault((path, c, side), {}).setdefault(kind, []).append(lat)
    print(f"## Tool / env call overhead: foreign path vs native, same work, same run — "
          f"{datetime.now():%Y-%m-%d %H:%M}; {args.rounds} interleaved rounds of "
          f"{args.calls} calls per side and concurrency (after a short warm-up); "
          f"{load0} at the start")
    for note in notes:
        print(note)
    names = {("mcp", "call"): "MCP convert call (stdio) via ToolEnv",
             ("openenv", "step"): "OpenEnv guess step (WebSocket)",
             ("openenv", "reset"): "OpenEnv guess reset (WebSocket)"}
    native_names = {"mcp": "native Tool", "openenv": "native in-process game"}
    head = (f"{'path':40} {'conc':>4} {'calls':>6} {'median µs':>10} {'p90 µs':>9} "
            f"{'ratio to native (mean ± 95% CI)':>32} {'extra µs / call':>17}")
    print(head)
    print("-" * len(head))
    for path in sides:
        for c in args.concurrency:
            for kind in res[(path, c, "foreign")]:
                s = summarize(res[(path, c, "foreign")][kind], res[(path, c, "native")][kind])
                ratio = f"{_pm(s['ratio'], s['ratio_h'], 2)}× (n={args.rounds})"
                print(f"{names[(path, kind)]:40} {c:>4} {s['f_n']:>6} {s['f_med']:>10.0f} "
                      f"{s['f_p90']:>9.0f} {ratio:>32} {_pm(s['extra'], s['extra_h'], 0):>17}")
                label = f"  {native_names[path]} ({kind})"
                print(f"{label:40} {c:>4} {s['n_n']:>6} {s['n_med']:>10.0f} {s['n_p90']:>9.0f} "
                      f"{'1 (baseline)':>32}")
    print(f"({load_line()} at the end)")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 2 for a CI)")
    ap.add_argument("--calls", type=int, default=200, help="calls (steps) per side, round "
                    "and concurrency")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8],
                    help="calls (MCP) or episodes (OpenEnv) in flight at once")
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--mcp-config", default="configs/mcp_example.yaml")
    ap.add_argument("--openenv-config", default="configs/openenv_example.yaml")
    args = ap.parse_args()
    if args.rounds < 1 or args.calls < 1 or min(args.concurrency) < 1:
        ap.error("--rounds, --calls and --concurrency must be >= 1")
    asyncio.run(run(args, load_line()))


if __name__ == "__main__":
    main()

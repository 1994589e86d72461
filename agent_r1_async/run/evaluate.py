"""Held-out evaluation: the training rollout code, an engine, no buffer.

`evaluate(cfg, split, num_tasks)` runs the first `num_tasks` tasks of `split`
(`eval.samples_per_task` episodes each, sampled at `eval.temperature`) through
`actors.rollout.Rollout` — the same context building, length limits and failure handling as
training — and averages:

- `outcome_reward`: mean final reward over episodes (failed episodes count as 0);
- `mean_return`: mean undiscounted episode return, the outcome reward plus the env's process
  rewards on the way (what RL maximizes; failed episodes count as 0);
- every metric the env reports at episode end (`em`, `f1`, `success`, `format_ok`, ...),
  averaged over the episodes that report it;
- `valid_tool_call_rate`: 1 - tool_errors / tool_calls, when the env reports both;
- `mean_steps`, `mean_action_tokens` (per action), `failed_rate`, `episodes`.

`evaluate_and_log` is the same, logged as `eval/{label}/*` (the `sft` command and `launch` with
`eval.in_launch` use it before and after training).

`format_table(rows)` prints result dicts as an aligned text table (one row per result).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agent_r1_async.config import RunConfig
from agent_r1_async.run.processes import child
from agent_r1_async.wire.messages import TRAINABLE_STATUSES, EpisodeEnd, StepRecord

if TYPE_CHECKING:
    from agent_r1_async.run.output.console import Console
    from agent_r1_async.run.output.metrics import MetricsLogger


MAX_ERRORS = 8
"""Distinct failure reasons an evaluation keeps (`errors`), in the order first seen."""


class _Tally:
    def __init__(self, errors: list[str] | None = None, keep_last: bool = False) -> None:
        self.ends: list[EpisodeEnd] = []
        self.keep_last = keep_last
        self.last: dict[str, StepRecord] = {}
        """Episode -> its last step (`keep_last`; evaluation records carry whole contexts)."""
        self.process: defaultdict[str, float] = defaultdict(float)
        self.action_tokens = 0
        self.actions = 0
        self.errors = errors if errors is not None else []
        self._seen: set[str] = set()

    async def emit(self, msg: StepRecord | EpisodeEnd) -> None:
        if isinstance(msg, StepRecord):
            self.action_tokens += len(msg.action_ids)
            self.actions += 1
            self.process[msg.episode_id] += msg.process_reward
            if self.keep_last:
                self.last[msg.episode_id] = msg
        else:
            self.ends.append(msg)
            failed = msg.status not in TRAINABLE_STATUSES and msg.status != "aborted"
            if failed and msg.error not in self._seen and len(self.errors) < MAX_ERRORS:
                self._seen.add(msg.error)
                self.errors.append(f"{msg.status} (task {msg.task_id}): {msg.error}")

    def last_ids(self, episode_id: str) -> list[int]:
        """The last step's context + action ids of `episode_id` ([]: no step)."""
        step = self.last.get(episode_id)
        return [] if step is None else [*step.context_ids, *step.action_ids]

    def summary(self) -> dict[str, float]:
        n = len(self.ends)
        if n == 0:
            raise ValueError("evaluation ran no episodes")
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for end in self.ends:
            for k, v in end.metrics.items():
                sums[k] += v
                counts[k] += 1
        out = {
            "episodes": float(n),
            "outcome_reward": sum(e.outcome_reward for e in self.ends) / n,
            "mean_return": sum(
                e.outcome_reward + self.process[e.episode_id]
                for e in self.ends if e.status in TRAINABLE_STATUSES
            ) / n,
            "failed_rate": sum(e.status not in TRAINABLE_STATUSES for e in self.ends) / n,
            "mean_steps": sum(e.num_steps for e in self.ends) / n,
            "mean_action_tokens": self.action_tokens / max(self.actions, 1),
        }
        if sums.get("tool_calls", 0) > 0 and "tool_errors" in sums:
            out["valid_tool_call_rate"] = 1.0 - sums["tool_errors"] / sums["tool_calls"]
        for k in sorted(sums):
            out.setdefault(k, sums[k] / counts[k])
        return out


BASELINES = ("", "base_tool_call", "naive_rag")
"""`--baseline`: "" (the policy), base_tool_call (the untrained `model.name_or_path` with the
env's tool prompt), naive_rag (top-k BM25 passages for the question in the prompt, one turn;
envs/multihop/naive_rag.py; the untrained model unless `model_path` is given)."""


def evaluate(
    cfg: RunConfig,
    split: str,
    num_tasks: int,
    model_path: str | None = None,
    engine: Any = None,
    baseline: str = "",
    rag_k: int = 0,
    errors: list[str] | None = None,
    episodes: list[dict[str, Any]] | None = None,
    with_text: bool = False,
) -> dict[str, float]:
    """Evaluate `model_path` (default `model.init_from`, else `model.name_or_path`) on `num_tasks` tasks of `split`.

    `engine`: an already running engine to use (the caller keeps ownership), else one is
    built from `engine.*` (backend `eval.backend` when set) with `eval.temperature`.
    `baseline`: one of BASELINES; `rag_k`: passages of naive_rag (0 = the env's top_k).
    `errors`: receives the distinct reasons of failed episodes ("env_error (task t3): ...",
    at most `MAX_ERRORS`), in the order first seen. `episodes`: receives one row per episode
    (`episode_row`), in the order they ended; with `with_text` each row also has `text`: the
    last step's context and action as the model saw and wrote them, decoded.
    """
    if num_tasks < 1:
        raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES[1:]}, got {baseline!r}")
    return asyncio.run(_evaluate(cfg, split, num_tasks, model_path, engine, baseline, rag_k,
                                 errors, episodes, with_text))


def _model_and_env(cfg: RunConfig, spec: Any, model_path: str | None, baseline: str,
                   rag_k: int) -> tuple[str, Callable[[], Any]]:
    """(model to load, episode factory) of an evaluation."""
    if baseline == "naive_rag":
        from agent_r1_async.envs.multihop.naive_rag import naive_rag_factory

        return model_path or cfg.model.name_or_path, naive_rag_factory(spec.definition, rag_k)
    if baseline == "base_tool_call":
        return model_path or cfg.model.name_or_path, spec.make
    return model_path or cfg.model.start_from, spec.make


async def run_episodes(runner: Any, tasks: list[Any], samples_per_task: int,
                       progress: Callable[[int, int], None] | None = None,
                       errors: list[str] | None = None,
                       rows: list[dict[str, Any]] | None = None,
                       concurrency: int = 0,
                       decode: Callable[[list[int]], str] | None = None) -> dict[str, float]:
    """`samples_per_task` episodes of every task, played by `runner` (an episode runner:
    actors/runner.py), at most `concurrency` at once (0: all), summarized;
    `progress(done, total)` after each episode; `errors` as in `evaluate`; `rows` receives
    one `episode_row` per episode, with its last step decoded by `decode` when given."""
    from agent_r1_async.actors.rollout import EpisodeIds

    tally = _Tally(errors, keep_last=decode is not None and rows is not None)
    k = samples_per_task
    total, done = len(tasks) * k, 0
    slots = asyncio.Semaphore(concurrency if concurrency > 0 else max(total, 1))

    async def episode(task: Any) -> None:
        nonlocal done
        async with slots:
            await runner.run(task, EpisodeIds.fresh(f"eval-{task.task_id}", k), tally.emit)
        done += 1
        if progress is not None:
            progress(done, total)

    await asyncio.gather(*(episode(task) for task in tasks for _ in range(k)))
    if rows is not None:
        rows.extend(episode_row(e, tally.process[e.episode_id],
                                None if decode is None else decode(tally.last_ids(e.episode_id)))
                    for e in tally.ends)
    return tally.summary()


def eval_concurrency(cfg: RunConfig) -> int:
    """Episodes an evaluation plays at once: `eval.concurrency`, or one actor's training load."""
    return cfg.eval.concurrency or cfg.actors.groups_in_flight * cfg.algorithm.group_size


def episode_row(end: EpisodeEnd, process_reward: float, text: str | None = None,
                ) -> dict[str, Any]:
    """One evaluated episode as a JSON-able row (`eval --episodes-out`): its task, how it
    ended, its outcome, return (outcome + process rewards; 0 when it failed), steps and the
    env's metrics; `text` (`eval --with-text`) when given: its last step's context and action
    ("" for an episode that ended before its first step)."""
    trainable = end.status in TRAINABLE_STATUSES
    row: dict[str, Any] = {
        "task_id": end.task_id, "status": end.status, "steps": end.num_steps,
        "outcome_reward": end.outcome_reward,
        "return": end.outcome_reward + process_reward if trainable else 0.0,
        "metrics": dict(end.metrics)}
    if text is not None:
        row["text"] = text
    return row


async def _evaluate(
    cfg: RunConfig, split: str, num_tasks: int, model_path: str | None, engine: Any,
    baseline: str = "", rag_k: int = 0, errors: list[str] | None = None,
    rows: list[dict[str, Any]] | None = None, with_text: bool = False,
) -> dict[str, float]:
    from agent_r1_async.actors.engines import make_engine
    from agent_r1_async.actors.rollout import Rollout
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.models import load_tokenizer, resolve_model

    spec = get_env_spec(cfg.env)
    model, make = _model_and_env(cfg, spec, model_path, baseline, rag_k)
    path = resolve_model(model)
    tasks = spec.tasks(split)[:num_tasks]
    if not tasks:
        raise ValueError(f"env {spec.name!r} has no tasks in split {split!r}")
    owns = engine is None
    if owns:
        if cfg.eval.backend:
            cfg = msgspec.structs.replace(
                cfg, engine=msgspec.structs.replace(cfg.engine, backend=cfg.eval.backend)
            )
        engine = make_engine(cfg, path, seed=cfg.launch.seed, temperature=cfg.eval.temperature)
    tokenizer = load_tokenizer(path)
    rollout = Rollout.from_config(cfg, engine, tokenizer, spec.name, "eval")
    runner = await eval_runner(cfg, spec, rollout, make)
    try:
        # child.progress: the launch's progress bar, when the launch runs this evaluation
        return await run_episodes(runner, tasks, cfg.eval.samples_per_task,
                                  progress=child.progress, errors=errors, rows=rows,
                                  concurrency=eval_concurrency(cfg),
                                  decode=tokenizer.decode if with_text else None)
    finally:
        await runner.close()
        if owns:
            await engine.close()


async def eval_runner(cfg: RunConfig, spec: Any, rollout: Any, make: Callable[[], Any]) -> Any:
    """The episode runner of an evaluation: our rollout over `make`, or, for an env whose
    agent plays through a generation endpoint (blackbox, verifiers), an endpoint over the
    evaluation's engine on a free loopback port, with tokens of its own
    (actors/endpoint/auth.py)."""
    from agent_r1_async.actors.runner import RolloutRunner, open_runner

    if make != spec.make:  # a baseline's own episodes
        return RolloutRunner(rollout, make)
    local = msgspec.structs.replace(
        cfg, endpoint=msgspec.structs.replace(cfg.endpoint, host="127.0.0.1", port=0))
    return await open_runner(local, spec, rollout, None, 0)


def with_valid_calls(result: dict[str, float]) -> dict[str, float]:
    """Add `valid_calls_per_episode` (tool calls minus tool errors): the share of episodes with
    a well-formed call when, as in the built-in envs' oracles, one call per episode is wanted."""
    if "tool_calls" in result and "tool_errors" in result:
        result["valid_calls_per_episode"] = result["tool_calls"] - result["tool_errors"]
    return result


def evaluate_split(cfg: RunConfig, model_path: str, num_tasks: int) -> dict[str, float]:
    """`evaluate` on `env.eval_split` (a module-level function: it can run in a subprocess)."""
    return evaluate(cfg, cfg.env.eval_split, num_tasks, model_path=model_path)


def evaluate_and_log(
    cfg: RunConfig, model_path: str, label: str, logger: MetricsLogger, step: int, num_tasks: int,
    prefix: str, run: Callable[[RunConfig, str, int], dict[str, float]] = evaluate_split,
    cache: Path | None = None,
) -> dict[str, Any]:
    """`run(cfg, model_path, num_tasks)` (default: `evaluate_split` here), logged as
    eval/{label}/* at `step`; the result row. With `cache` (run/eval_cache.py), a result kept
    there is logged instead of running, and a result run is kept there."""
    import time

    from agent_r1_async.run import eval_cache

    t0 = time.perf_counter()
    cached = eval_cache.load(cache)
    result = with_valid_calls(cached if cached is not None else run(cfg, model_path, num_tasks))
    seconds = time.perf_counter() - t0
    if cached is None:
        eval_cache.save(cache, result, seconds)
    logger.log({f"eval/{label}/{k}": v for k, v in result.items()}, step=step)
    how = (f"cached: the same weights, tasks, seed and engine settings ran before ({cache})"
           if cached is not None else f"{seconds:.1f} s")
    logger.console(f"{prefix} eval {label} ({cfg.env.eval_split}, {num_tasks} tasks): {how}")
    return {"model": label, **result}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 1 else f"{value:.4f}"
    return str(value)


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows of results as an aligned table; columns are the union of keys, first-seen order."""
    if not rows:
        return "(no results)"
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    cells = [[_cell(row.get(c, float("nan"))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


EVAL_COLUMNS = ("episodes", "outcome_reward", "success", "em", "f1", "format_ok", "tool_calls")
"""The held-out metrics the launch prints first (those the env reports)."""
_NOT_SHOWN = {"mean_return", "mean_steps", "mean_action_tokens", "valid_tool_call_rate", "turns",
              "tool_errors", "truncated", "version", "checkpoint", "split"}
"""Generic columns left to eval.json; any other (env-specific) metric is printed too."""


def eval_columns(result: dict[str, Any]) -> list[str]:
    """EVAL_COLUMNS the result has, then the env's own metrics (e.g. a custom `accuracy`)."""
    first = [c for c in EVAL_COLUMNS if c in result]
    return first + [c for c in result if c not in first and c not in _NOT_SHOWN
                    and not c.startswith("hacking_")]  # canaries: in eval.json and W&B


def held_out(cfg: RunConfig, run_dir: Path, logger: MetricsLogger, label: str, model: str,
             step: int, console: Console | None = None, cached: bool = False) -> None:
    """Evaluate `model` on held-out tasks (eval.in_launch); log it and keep it in eval.json.

    The evaluation runs in a child process whose output goes to RUN_DIR/logs/eval-LABEL.log
    (unless `logging.verbose`); `console` draws its tasks done / total. `cached`: when
    `model` is a cached warm start, its result is kept beside it and reused
    (run/eval_cache.py)."""
    from agent_r1_async.run import eval_cache

    cache = eval_cache.cache_path(cfg, model) if cached else None
    log = None if cfg.logging.verbose else str(run_dir / "logs" / f"eval-{label}.log")
    key, n = f"eval-{label}", cfg.eval.num_tasks * cfg.eval.samples_per_task
    on_message = None
    if eval_cache.load(cache) is not None:
        n = 0  # nothing runs: no progress to draw
    elif console is not None and label == "before":
        import os

        console.say(f"held-out eval before: runs before RL starts, alone on this machine's "
                    f"{os.cpu_count()} CPU cores, so that neither slows the other"
                    + ("; a later launch from this warm start reuses its result"
                       if cache is not None else ""))
    if console is not None and n:
        console.stage(key, f"held-out eval {label}", n)

        def on_message(msg: tuple) -> None:
            if msg[0] == "progress":
                console.advance(key, msg[1], msg[2])
            else:
                console.print(msg[1])

    row = evaluate_and_log(
        cfg, model, label, logger, step, cfg.eval.num_tasks, "[launch]",
        run=lambda c, m, n: child.in_subprocess(evaluate_split, c, m, n, log_path=log,
                                                on_message=on_message),
        cache=cache,
    )
    if console is not None and n:
        console.finish(key)
    result = {k: v for k, v in row.items() if k != "model"}
    path = run_dir / "eval.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[label] = {**result, "version": step, "checkpoint": model, "split": cfg.env.eval_split}
    path.write_text(json.dumps(saved, indent=1))
    rows = [{"model": k, "version": int(v["version"]), **{m: v[m] for m in eval_columns(v)}}
            for k, v in saved.items()]
    (console.print if console is not None else print)(format_table(rows))

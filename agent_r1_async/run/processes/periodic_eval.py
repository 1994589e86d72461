"""`eval.every_updates: N`: held-out evaluation of the latest policy while RL runs.

Design: an *evaluation actor*. One more Ray process (`EvalHost`) with its own engine
(`eval.backend`, else `engine.backend`) subscribes to the learner's weights like the actors do
(weights.backend zmq) and evaluates the first `eval.every_num_tasks` tasks of
`env.eval_split` (a fixed subset, `eval.samples_per_task` episodes each, `eval.temperature`)
with the training rollout code (run/evaluate.py `run_episodes`):

    version 0 (the starting policy), then the first version it holds >= the next multiple of N

It never talks to the buffer, so the learner never waits for it: the only cost to training
is the CPU (or GPU) the evaluation takes from the other processes, which the launch test
measures (tests/integration/test_periodic_eval.py). Weights that arrive during an evaluation
are drained and only the newest is kept (one state dict at most: a SUB queue of full weight
sets would otherwise grow by one per update), so one evaluation runs on one version.

If an evaluation takes longer than N updates, versions are skipped, never queued: every result
names the version it evaluated (`version`). The launch logs each result as `eval/periodic/*`:
in metrics.jsonl with `update` = the evaluated version, in W&B at the learner's current step
with `eval/periodic/version` as its x axis (`define_metric`), since W&B steps only increase.
A restarted learner group binds a new weights socket: the launch points the evaluator at it
after the restart (`PeriodicEval.follow`), and the versions the new group redoes from its
checkpoint are not evaluated again (each version once, like the metrics).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import msgspec

from agent_r1_async.config import RunConfig
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport

_IDLE_S = 0.05
_DRAIN_S = 0.2


def cpu_seconds() -> float:
    """CPU time of this process and its live children (a vLLM engine core is one)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # exited meanwhile
            continue
    return total


def next_due(version: int, every: int) -> int:
    """The first version after `version` that is a multiple of `every`."""
    return (version // every + 1) * every


class Evaluator:
    """Engine + weight subscription + the fixed held-out subset (a plain class; tests build it)."""

    def __init__(self, cfg: RunConfig, transport: Any, weights_endpoint: str,
                 start_version: int = 0, engine: Any = None) -> None:
        if cfg.eval.every_updates < 1:
            raise ValueError("eval.every_updates: must be >= 1 for a periodic evaluator")
        self.cfg = cfg
        self.transport, self.weights_endpoint = transport, weights_endpoint
        self.engine = engine
        self._owns_engine = engine is None
        self.due = start_version  # a resumed run evaluates from the version it resumed at
        self.results: list[dict[str, float]] = []
        self._lock = threading.Lock()
        self._pending: Any = None
        self._new_endpoint: str | None = None

    def retarget(self, weights_endpoint: str) -> None:
        """Subscribe to a restarted learner's weights socket (it binds a new port). Taken up
        between evaluations; thread-safe. Versions the new learner redoes (it resumed from an
        older checkpoint) are not applied again: each version is evaluated once."""
        with self._lock:
            self._new_endpoint = weights_endpoint

    def take_results(self) -> list[dict[str, float]]:
        """Results finished since the last call (thread-safe)."""
        with self._lock:
            out, self.results = self.results, []
        return out

    def run(self, stop: threading.Event) -> None:
        asyncio.run(self._main(stop))

    async def _main(self, stop: threading.Event) -> None:
        from agent_r1_async.actors.engines import make_engine
        from agent_r1_async.actors.rollout import Rollout
        from agent_r1_async.envs.registry import get_env_spec
        from agent_r1_async.models import load_tokenizer, resolve_model
        from agent_r1_async.weights.zmq import WeightSubscriber

        cfg = self.cfg
        path = resolve_model(cfg.model.start_from)
        spec = get_env_spec(cfg.env)
        tasks = spec.tasks(cfg.env.eval_split)[: cfg.eval.every_num_tasks]
        if self.engine is None:
            ecfg = msgspec.structs.replace(cfg, engine=msgspec.structs.replace(
                cfg.engine, backend=cfg.eval.backend or cfg.engine.backend))
            self.engine = make_engine(ecfg, path, seed=cfg.launch.seed,
                                      temperature=cfg.eval.temperature)
        rollout = Rollout.from_config(cfg, self.engine, load_tokenizer(path), spec.name,
                                      "evaluator")
        from agent_r1_async.run.evaluate import eval_runner

        runner = await eval_runner(cfg, spec, rollout, spec.make)
        self._rx = WeightSubscriber(self.transport, self.weights_endpoint)
        try:
            while not stop.is_set():
                self._follow_endpoint(WeightSubscriber)
                await self._apply_newest()
                if self.engine.version >= self.due:
                    await self._evaluate(runner, tasks)
                else:
                    await asyncio.sleep(_IDLE_S)
        finally:
            self._rx.close()
            await runner.close()
            if self._owns_engine:
                await self.engine.close()

    def _follow_endpoint(self, receiver_cls: Any) -> None:
        with self._lock:
            endpoint, self._new_endpoint = self._new_endpoint, None
        if endpoint is None or endpoint == self.weights_endpoint:
            return
        self._rx.close()
        self._pending = None  # from the old learner
        self.weights_endpoint = endpoint
        self._rx = receiver_cls(self.transport, endpoint)

    async def _apply_newest(self) -> None:
        got = self._rx.poll(0) or self._pending
        self._pending = None
        if got is not None and got[0].version > self.engine.version:
            await self.engine.load_weights(got[0].version, got[1])

    async def _drain(self) -> None:
        """During an evaluation: keep only the newest arriving weights (bounded memory)."""
        while True:
            got = self._rx.poll(0)
            if got is not None:
                self._pending = got
            await asyncio.sleep(_DRAIN_S)

    async def _evaluate(self, runner: Any, tasks: list[Any]) -> None:
        from agent_r1_async.run.evaluate import eval_concurrency, run_episodes

        version = self.engine.version
        t0, cpu0 = time.monotonic(), cpu_seconds()
        drain = asyncio.create_task(self._drain())
        try:
            result = await run_episodes(runner, tasks, self.cfg.eval.samples_per_task,
                                        concurrency=eval_concurrency(self.cfg))
        finally:
            drain.cancel()
        result["version"] = float(version)
        result["eval_time_s"] = time.monotonic() - t0
        result["eval_cpu_s"] = cpu_seconds() - cpu0  # the evaluation's share of the machine
        with self._lock:
            self.results.append(result)
        self.due = next_due(version, self.cfg.eval.every_updates)


class EvalHost:
    """The evaluator in a Ray process (the launcher wraps it with `ray.remote`)."""

    def __init__(self, cfg: RunConfig, weights_endpoint: str, curve: CurveKeys | None,
                 start_version: int, log_dir: str | None = None) -> None:
        import os

        import torch

        from agent_r1_async.run.output.logs import own_log

        own_log(cfg, log_dir, "eval")  # RUN_DIR/logs/eval.log, not the console

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)  # one core's worth: the evaluation's share stays small
        self._stop = threading.Event()
        self.evaluator = Evaluator(cfg, ZmqTransport(curve=curve), weights_endpoint,
                                   start_version)

    def run(self) -> None:
        self.evaluator.run(self._stop)

    def take_results(self) -> list[dict[str, float]]:
        return self.evaluator.take_results()

    def retarget(self, weights_endpoint: str) -> None:
        self.evaluator.retarget(weights_endpoint)

    def stop(self) -> None:
        self._stop.set()


class PeriodicEval:
    """The launch's handle: start the EvalHost, poll its results, stop it."""

    def __init__(self, cfg: RunConfig, weights_endpoint: str, curve: CurveKeys | None,
                 start_version: int, log_dir: str | None = None) -> None:
        import ray

        self.ray = ray
        cls = ray.remote(num_cpus=0, max_concurrency=2, max_restarts=0)(EvalHost)
        self.host = cls.remote(cfg, weights_endpoint, curve, start_version, log_dir)
        self.run_ref = self.host.run.remote()
        self.failed = False
        self.weights_endpoint = weights_endpoint

    def follow(self, weights_endpoint: str) -> None:
        """After a learner restart (new weights port): point the evaluator at it. Without
        this its results stop at the old learner's last version."""
        if self.failed or weights_endpoint == self.weights_endpoint:
            return
        try:
            self.ray.get(self.host.retarget.remote(weights_endpoint), timeout=30)
            self.weights_endpoint = weights_endpoint
        except Exception as e:  # an evaluator failure never fails the run
            self.failed = True
            print(f"[launch] periodic evaluation stopped: {e!r} (the run goes on)", flush=True)

    def poll(self) -> list[dict[str, float]]:
        """Finished results (never blocks on an evaluation in progress). A dead evaluator
        (killed, out of memory) is reported once and never fails the run."""
        if self.failed:
            return []
        try:
            return self.ray.get(self.host.take_results.remote(), timeout=30)
        except Exception as e:
            self.failed = True
            print(f"[launch] periodic evaluation stopped: {e!r} (the run goes on)", flush=True)
            return []

    def stop(self, wait_s: float) -> list[dict[str, float]]:
        """Let the evaluation in progress finish (up to `wait_s`), then the last results."""
        try:
            self.ray.get(self.host.stop.remote(), timeout=10)
            self.ray.wait([self.run_ref], timeout=wait_s)
            return self.poll()
        except Exception as e:  # an evaluator failure never fails the run
            print(f"[launch] periodic evaluation: {e!r}", flush=True)
            return []
        finally:
            self.ray.kill(self.host, no_restart=True)


def log_result(logger: Any, result: dict[str, float], step: int) -> None:
    """One result as `eval/periodic/*` (metrics.jsonl at its version; W&B at `step`)."""
    version = int(result["version"])
    logger.log_at_version({f"eval/periodic/{k}": v for k, v in result.items()},
                          version=version, step=step, x_axis="eval/periodic/version")
    em = result.get("em", result.get("success", result.get("outcome_reward")))
    logger.console(f"[launch] eval v{version} ({int(result['episodes'])} episodes, "
                   f"{result['eval_time_s']:.0f} s): {em:.3f}")

"""`agent-r1-async launch`: place buffer, learner and actors with Ray, wire ZeroMQ, supervise.

    driver (this process)
      ├─ BufferHost   ray actor: PULL records, ROUTER credits/samples, snapshots
      ├─ LearnerHost  ray actor: samples, optimizes, PUBlishes weights
      └─ ActorHost×N  ray actors (restarted by Ray up to actors.max_restarts): episodes

The driver loop asks the learner for one update at a time, logs the merged metrics (learner,
buffer, actors) to W&B / metrics.jsonl / console, and restarts an actor's run loop after Ray
restarts a dead actor process. Ctrl-C (or launch.max_wall_time_s) stops gracefully: actors
stop, the learner checkpoints, the buffer snapshots. `--resume RUN_DIR` continues from the
latest checkpoint and buffer snapshot with the same W&B run.

Local by default (embedded Ray with enough logical CPUs for every process on this machine);
`--address auto` or `RAY_ADDRESS` joins an existing cluster.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.config import ConfigError, RunConfig, dump_config
from agent_r1_async.monitor import MetricsLogger, progress_line
from agent_r1_async.transport import CurveKeys


def check_model(cfg: RunConfig) -> None:
    """Fail before anything starts when the policy or init checkpoint cannot be found.

    Known aliases are prepared later by the processes that load them (cached, once); local
    paths must exist and hold a HF model; a hub id is left to the loader (it needs network).
    """
    from agent_r1_async.models import KNOWN_MODELS, TINY_MODEL_ALIAS, resolve_model

    for key, value in (("model.name_or_path", cfg.model.name_or_path),
                       ("model.init_from", cfg.model.init_from)):
        if not value or value in KNOWN_MODELS or value == TINY_MODEL_ALIAS:
            continue
        try:
            resolve_model(value)
        except (FileNotFoundError, KeyError) as e:
            raise ConfigError(f"{key}: {e}") from None


def make_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(cfg.launch.run_root) / f"{cfg.launch.name}-{stamp}-{n}"
    for sub in ("checkpoints", "logs", "buffer"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir.resolve()


def _cpus_needed(cfg: RunConfig) -> float:
    return cfg.learner.num_cpus + cfg.actors.num_actors * cfg.actors.num_cpus + 0.5


def ray_address(cfg: RunConfig, address: str | None) -> str | None:
    return address or cfg.launch.address or os.environ.get("RAY_ADDRESS") or None


def use_cluster_token(address: str | None) -> None:
    """Ray heads use token auth by default and a driver joining one must opt in to send the
    token. Ray reads the mode when it is imported: call this before `import ray`."""
    has_token = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or (
        Path.home() / ".ray" / "auth_token").exists()
    if address and has_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"


def start_ray(cfg: RunConfig, address: str | None) -> None:
    import ray

    address = ray_address(cfg, address)
    env = {"TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": str(cfg.engine.kv_cache_gb)}
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=True)
        return
    # Logical CPUs: at least what the processes ask for, so a 2-core box never deadlocks on
    # placement (they share the cores; the OS schedules them).
    num_cpus = cfg.launch.num_cpus or max(os.cpu_count() or 1, math.ceil(_cpus_needed(cfg)))
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=True,
        configure_logging=False,
    )


class Supervisor:
    """Starts the processes and keeps the actors' run loops alive."""

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool, curve: CurveKeys | None) -> None:
        import ray

        from agent_r1_async.hosts import ActorHost, BufferHost, LearnerHost

        self.cfg = cfg
        self.ray = ray
        self.buffer = ray.remote(num_cpus=0.5, max_concurrency=4)(BufferHost).remote(
            cfg, str(run_dir / "buffer"), curve, resume
        )
        self.endpoints: dict[str, str] = ray.get(self.buffer.endpoints.remote())
        self.learner = ray.remote(
            num_cpus=cfg.learner.num_cpus, num_gpus=cfg.learner.num_gpus, max_concurrency=2
        )(LearnerHost).remote(cfg, self.endpoints["control"], str(run_dir), resume, curve)
        self.endpoints["weights"] = ray.get(self.learner.weights_endpoint.remote())
        actor_cls = ray.remote(
            num_cpus=cfg.actors.num_cpus,
            num_gpus=cfg.actors.num_gpus,
            max_restarts=cfg.actors.max_restarts,
            max_concurrency=2,
        )(ActorHost)
        self.actors = [
            actor_cls.remote(cfg, f"actor-{i}", self.endpoints, curve)
            for i in range(cfg.actors.num_actors)
        ]
        self.runs = {a.run.remote(): i for i, a in enumerate(self.actors)}
        self.restarts = [0] * len(self.actors)
        if resume:
            ray.get(self.learner.publish.remote())

    def check_actors(self) -> None:
        """Re-run the loop of an actor whose process died (Ray restarted it)."""
        done, _ = self.ray.wait(list(self.runs), timeout=0, num_returns=len(self.runs))
        for ref in done:
            i = self.runs.pop(ref)
            try:
                self.ray.get(ref)
                continue  # finished normally (stopped)
            except self.ray.exceptions.RayActorError as e:
                reason = f"actor-{i} died: {type(e).__name__}"
            except Exception as e:  # the actor's loop raised: treat like a crash
                reason = f"actor-{i} failed: {e!r}"
            self.restarts[i] += 1
            if self.restarts[i] > self.cfg.actors.max_restarts:
                raise RuntimeError(f"{reason}; restarted {self.cfg.actors.max_restarts} times")
            print(f"[launch] {reason}; restarting its loop ({self.restarts[i]})", file=sys.stderr)
            self._wait_restarted(i, reason)
            self.runs[self.actors[i].run.remote()] = i

    def _wait_restarted(self, i: int, reason: str, timeout_s: float = 300.0) -> None:
        """Block until Ray has brought actor i back (a call submitted while it is restarting
        fails with ActorUnavailableError, "may or may not have been executed": re-running the
        loop then would count a second crash, or start a second loop in the same process)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.ray.get(self.actors[i].pid.remote(), timeout=30)
                return
            except (self.ray.exceptions.ActorUnavailableError,
                    self.ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{reason}; not back after {timeout_s:.0f} s") from None
                time.sleep(0.5)

    def update(self) -> dict[str, Any]:
        """One learner update: {"metrics": ..., "staleness_hist": ...} (see LearnerHost)."""
        ref = self.learner.update.remote()
        while True:
            ready, _ = self.ray.wait([ref], timeout=0.5)
            if ready:
                return self.ray.get(ref)
            self.check_actors()

    def buffer_stats(self) -> dict[str, Any]:
        return self.ray.get(self.buffer.stats.remote())

    def shutdown(self, checkpoint: bool) -> str | None:
        """Actors first (their aborted-episode records reach the buffer), then the learner's
        checkpoint, then the buffer's final snapshot."""
        ray = self.ray
        path = None
        for a in self.actors:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to stop
                ray.get(a.stop.remote(), timeout=10)
        ray.wait(list(self.runs), timeout=30, num_returns=len(self.runs))
        if checkpoint:
            path = ray.get(self.learner.save_checkpoint.remote())
        try:
            ray.get(self.buffer.stop.remote(), timeout=30)
        except Exception as e:
            print(f"[launch] buffer stop failed: {e!r}", file=sys.stderr)
        return path


# Learner metric names -> the names a user looks for in W&B.
_RENAME = {
    "staleness_mean": "staleness/mean",
    "staleness_max": "staleness/max",
    "is_weight_mean": "is_weight/mean",
    "is_weight_max": "is_weight/max",
    "mismatch_kl": "is_weight/mismatch_kl",
    "masked_frac": "is_weight/masked_frac",
    "idle_frac": "learner/idle_ratio",
}


class ActorRates:
    """Actor throughput between two metric records, from the actors' cumulative counters.

    An actor's own `tokens_per_s` covers its last stats window (`actors.stats_interval_s`,
    5 s): a learner-bound actor that waits for admission at that moment reads 0 although it
    generated a full batch since the last update. Here each actor's rates are the differences
    of its totals (`tokens_total`, episodes ended) between the reports seen at consecutive
    records, over the difference of their times; the first record uses the window rates.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}

    def __call__(self, actor_id: str, stats: dict[str, Any]) -> tuple[float, float]:
        """(tokens/s, episodes/s) of this actor since its report at the previous record."""
        now = (float(stats["time"]), int(stats.get("tokens_total", 0)),
               int(stats["episodes_done"]) + int(stats["episodes_failed"]))
        prev = self._last.get(actor_id)
        self._last[actor_id] = now
        if prev is None or now[0] <= prev[0] or now[1] < prev[1]:  # first, same report, restart
            return float(stats["tokens_per_s"]), float(stats["episodes_per_s"])
        dt = now[0] - prev[0]
        return (now[1] - prev[1]) / dt, (now[2] - prev[2]) / dt


def merge_metrics(
    update: dict[str, Any], buffer: dict[str, Any], rates: ActorRates | None = None
) -> tuple[dict, dict]:
    """Flatten learner + buffer + actor metrics into one record and its histograms.

    `rates` (kept across records) turns actor throughput into averages since the previous
    record; without it the actors' last-window rates are reported.
    """
    out: dict[str, Any] = {}
    for k, v in update["metrics"].items():
        if "/" in k or k == "version":
            out[k] = v
        else:
            out[_RENAME.get(k, f"learner/{k}")] = v
    for key in ("groups_ready", "groups_assembling", "episodes_stored", "bytes_stored",
                "in_flight_groups", "accepted_groups", "sampled_groups", "ingest_records_per_s"):
        if key in buffer:
            out[f"buffer/{key}"] = buffer[key]
    for reason, count in buffer.get("drops", {}).items():
        out[f"buffer/drops/{reason}"] = count
    actors = buffer.get("actors", {})
    if actors:
        tok_total = eps_total = 0.0
        for actor_id, stats in actors.items():
            for k in ("weight_sync_latency_s", "policy_version", "episodes_in_flight",
                      "gen_time_s", "env_time_s"):
                out[f"actor/{actor_id}/{k}"] = stats[k]
            tok, eps = (rates(actor_id, stats) if rates is not None
                        else (stats["tokens_per_s"], stats["episodes_per_s"]))
            out[f"actor/{actor_id}/tokens_per_s"] = tok
            out[f"actor/{actor_id}/episodes_per_s"] = eps
            tok_total += tok
            eps_total += eps
        out["actors/tokens_per_s"] = tok_total
        out["actors/episodes_per_s"] = eps_total
        out["actors/weight_sync_latency_s"] = max(s["weight_sync_latency_s"] for s in actors.values())
    hist = {int(k): int(v) for k, v in update.get("staleness_hist", {}).items()}
    return out, {"staleness/hist": hist}


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops as gracefully as Ctrl-C


def in_subprocess(fn: Any, *args: Any) -> Any:
    """`fn(*args)` in a fresh spawned process; its return value, or its exception re-raised.

    The warm start and the held-out evaluations run this way: a trainer or an engine leaves
    gigabytes in the allocator of the process that ran it, and the driver stays alive (next
    to the learner and the actors) for the whole run.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _print(line: str) -> None:
    print(line, flush=True)


def _warm_start_child(cfg: RunConfig) -> str:
    from agent_r1_async.sft.warm_start import warm_start

    return warm_start(cfg, _print)


def prepare_start(cfg: RunConfig, run_dir: Path) -> RunConfig:
    """`launch.warm_start`: train (or reuse) the supervised warm start and start RL from it.

    The run's config.yaml then names the checkpoint in `model.init_from`, so `--resume` and
    the W&B config say where version 0 came from.
    """
    if not cfg.launch.warm_start or cfg.model.init_from:
        return cfg
    ckpt = in_subprocess(_warm_start_child, cfg)
    cfg = msgspec.structs.replace(cfg, model=msgspec.structs.replace(cfg.model, init_from=ckpt))
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return cfg


EVAL_COLUMNS = ("episodes", "outcome_reward", "success", "em", "f1", "format_ok", "tool_calls")
"""The held-out metrics the launch prints (those the env reports)."""


def held_out(cfg: RunConfig, run_dir: Path, logger: MetricsLogger, label: str, model: str,
             step: int) -> None:
    """Evaluate `model` on held-out tasks (eval.in_launch); log it and keep it in eval.json."""
    from agent_r1_async.evaluate import evaluate_and_log, evaluate_split, format_table

    row = evaluate_and_log(
        cfg, model, label, logger, step, cfg.eval.num_tasks, "[launch]",
        run=lambda c, m, n: in_subprocess(evaluate_split, c, m, n),
    )
    result = {k: v for k, v in row.items() if k != "model"}
    path = run_dir / "eval.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[label] = {**result, "version": step, "checkpoint": model, "split": cfg.env.eval_split}
    path.write_text(json.dumps(saved, indent=1))
    rows = [{"model": k, "version": int(v["version"]),
             **{m: v[m] for m in EVAL_COLUMNS if m in v}} for k, v in saved.items()]
    print(format_table(rows), flush=True)


def launch(cfg: RunConfig, address: str | None = None, resume: str | None = None) -> int:
    check_model(cfg)  # before Ray starts or a run directory is made
    use_cluster_token(ray_address(cfg, address))
    import ray

    if resume:
        run_dir = Path(resume).resolve()
        (run_dir / "config.yaml").write_text(dump_config(cfg))
    else:
        run_dir = make_run_dir(cfg)
    print(f"[launch] run directory: {run_dir}", flush=True)
    wandb_id = (run_dir / "wandb_run_id").read_text().strip() if resume and (
        run_dir / "wandb_run_id").exists() else None
    logger = MetricsLogger(cfg, run_dir, resume_id=wandb_id)
    stop_reason = "done"
    sup = None
    ckpt = None
    version = 0
    eval_after = False  # set when the run ends normally with eval.in_launch
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    wandb_dir = logger.wandb_dir
    try:
        cfg = prepare_start(cfg, run_dir)
        if cfg.eval.in_launch and not resume:
            held_out(cfg, run_dir, logger, "before", cfg.model.start_from, step=0)
        start_ray(cfg, address)
        # Keys travel to the processes as Ray task arguments; they never touch a ZMQ socket.
        joined = ray_address(cfg, address) is not None
        curve = CurveKeys.generate() if cfg.launch.curve or joined else None
        sup = Supervisor(cfg, run_dir, resume=bool(resume), curve=curve)
        version = ray.get(sup.learner.version.remote())
        t_start = time.monotonic()
        rates = ActorRates()
        while version < cfg.learner.total_updates:
            update = sup.update()
            version = int(update["metrics"]["version"])
            record, hists = merge_metrics(update, sup.buffer_stats(), rates)
            logger.log(record, step=version, histograms=hists)
            logger.console(progress_line(record))
            if cfg.launch.max_wall_time_s and time.monotonic() - t_start > cfg.launch.max_wall_time_s:
                stop_reason = "max_wall_time_s"
                break
        eval_after = cfg.eval.in_launch
    except KeyboardInterrupt:
        stop_reason = "interrupted"
        print("\n[launch] stopping: checkpoint and buffer snapshot ...", flush=True)
    finally:
        try:
            ckpt = sup.shutdown(checkpoint=True) if sup is not None else None
        finally:
            signal.signal(signal.SIGTERM, previous)
            if ray.is_initialized():
                ray.shutdown()
            if not (eval_after and ckpt):
                logger.close()
    print(f"[launch] {stop_reason}; checkpoint: {ckpt}", flush=True)
    if eval_after and ckpt:
        try:
            held_out(cfg, run_dir, logger, "after", ckpt, step=version)
        except KeyboardInterrupt:
            print("\n[launch] held-out evaluation interrupted", flush=True)
        finally:
            logger.close()
    try:
        from agent_r1_async.report import write_report

        for p in write_report(run_dir):
            print(f"[launch] plot: {p}", flush=True)
    except Exception as e:  # plots are a convenience; never fail a finished run on them
        print(f"[launch] report failed: {e!r}", file=sys.stderr)
    if wandb_dir:
        print(f"[launch] W&B run: {wandb_dir} (sync with `wandb sync` when offline)")
    print(f"[launch] run directory: {run_dir}", flush=True)
    return 0 if stop_reason in ("done", "max_wall_time_s") else 130

"""`agent-r1-async launch`: the run's orchestration, start → loop → stop.

    start: preflight (model, engine backend) → run dir → warm start → held-out "before"
           → Ray → buffer, learner, N actors (supervisor.py)
    loop:  one learner update at a time → merged metrics → W&B / metrics.jsonl / console,
           restarting an actor's loop when Ray restarted its process
    stop:  actors stop, the learner checkpoints, the buffer snapshots → held-out "after"
           → plots

Ctrl-C, SIGTERM and `launch.max_wall_time_s` stop gracefully. `--resume RUN_DIR` continues
from the latest checkpoint and buffer snapshot with the same W&B run. Local by default
(embedded Ray); `--address auto` or `RAY_ADDRESS` joins an existing cluster. Everything the
loop does not decide lives beside it: supervisor.py (Ray), monitor.py (metric naming and
sinks), warm_start.py, evaluate.py (held-out tables), run_dir.py, report.py.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

from agent_r1_async.config import ConfigError, RunConfig, dump_config
from agent_r1_async.models import attention_implementation
from agent_r1_async.run.evaluate import held_out
from agent_r1_async.run.monitor import ActorRates, MetricsLogger, merge_metrics, progress_line
from agent_r1_async.run.periodic_eval import PeriodicEval, log_result
from agent_r1_async.run.run_dir import make_run_dir
from agent_r1_async.run.supervisor import (
    EnvFailing,
    Supervisor,
    ray_address,
    start_ray,
    stop_ray,
)
from agent_r1_async.run.warm_start import prepare_start
from agent_r1_async.wire.zmq import CurveKeys


def preflight(cfg: RunConfig) -> None:
    """Fail before Ray starts or a run directory is made: the policy or init checkpoint
    cannot be found, a configured engine backend is not installed, or the env cannot be
    imported, configured, built or has no tasks (`env_preflight`).

    Known aliases are prepared later by the processes that load them (cached, once); local
    paths must exist and hold a HF model; a hub id is left to the loader (it needs network).
    """
    from agent_r1_async.actors.engines import require_backend
    from agent_r1_async.models import KNOWN_MODELS, TINY_MODEL_ALIAS, resolve_model

    for key, value in (("model.name_or_path", cfg.model.name_or_path),
                       ("model.init_from", cfg.model.init_from)):
        if not value or value in KNOWN_MODELS or value == TINY_MODEL_ALIAS:
            continue
        try:
            resolve_model(value)
        except (FileNotFoundError, KeyError) as e:
            raise ConfigError(f"{key}: {e}") from None
    backends = {("engine.backend", cfg.engine.backend)}
    if cfg.eval.in_launch:
        backends.add(("eval.backend", cfg.eval.backend or cfg.engine.backend))
    for key, backend in sorted(backends):
        try:
            require_backend(backend)
        except RuntimeError as e:
            raise ConfigError(f"{key}: {e}") from None
    env_preflight(cfg, "launch")


def env_preflight(cfg: RunConfig, command: str, split: str | None = None) -> None:
    """The env's cheap checks (envs/check.py) for the splits `command` will use: the actors
    need one train task per actor; evaluations need one task of their split."""
    from agent_r1_async.envs.check import preflight_env

    env = cfg.env
    splits = {split or env.eval_split: 1} if command == "eval" else {env.train_split: 1}
    if command == "launch":
        splits[env.train_split] = cfg.actors.num_actors
        if cfg.eval.in_launch:
            splits.setdefault(env.eval_split, 1)
    if command == "sft" and (cfg.sft.eval_before or cfg.sft.eval_after):
        splits.setdefault(env.eval_split, 1)
    preflight_env(env, splits)


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops as gracefully as Ctrl-C. `ray.init` replaces the process's SIGTERM
    handler with one that kills Ray's processes and exits at once (no checkpoint, no final
    snapshot), so launch installs this one again after Ray starts."""
    raise KeyboardInterrupt


def _say(line: str) -> None:
    print(f"[launch] {line}", flush=True)


def _open_run_dir(cfg: RunConfig, resume: str | None) -> Path:
    if not resume:
        return make_run_dir(cfg)
    run_dir = Path(resume).resolve()
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir


def _wandb_id(run_dir: Path, resume: str | None) -> str | None:
    path = run_dir / "wandb_run_id"
    return path.read_text().strip() if resume and path.exists() else None


def _train(cfg: RunConfig, sup: Supervisor, logger: MetricsLogger,
           evals: PeriodicEval | None = None) -> tuple[int, str]:
    """The RL loop: (last version, why it stopped)."""
    version = sup.version()
    t_start = time.monotonic()
    rates = ActorRates()
    while version < cfg.learner.total_updates:
        update = sup.update()
        version = int(update["metrics"]["version"])
        buffer = sup.buffer_stats()
        sup.check_failures(buffer)
        record, hists = merge_metrics(update, buffer, rates)
        logger.log(record, step=version, histograms=hists)
        logger.console(progress_line(record))
        for result in evals.poll() if evals is not None else []:
            log_result(logger, result, step=version)
        if cfg.launch.max_wall_time_s and time.monotonic() - t_start > cfg.launch.max_wall_time_s:
            return version, "max_wall_time_s"
    return version, "done"


def _report(run_dir: Path) -> None:
    try:
        from agent_r1_async.run.report import write_report

        for p in write_report(run_dir):
            _say(f"plot: {p}")
    except Exception as e:  # plots are a convenience; never fail a finished run on them
        print(f"[launch] report failed: {e!r}", file=sys.stderr)


def launch(cfg: RunConfig, address: str | None = None, resume: str | None = None) -> int:
    preflight(cfg)
    run_dir = _open_run_dir(cfg, resume)
    _say(f"run directory: {run_dir}")
    attn, why = attention_implementation(cfg.learner.device, cfg.learner.flash_attention)
    _say(f"learner attention: {attn} ({why})")
    logger = MetricsLogger(cfg, run_dir, resume_id=_wandb_id(run_dir, resume))
    sup: Supervisor | None = None
    evals: PeriodicEval | None = None
    ckpt, version, stop_reason, failure = None, 0, "interrupted", ""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        # start
        cfg = prepare_start(cfg, run_dir)
        if cfg.eval.in_launch and not resume:
            held_out(cfg, run_dir, logger, "before", cfg.model.start_from, step=0)
        start_ray(cfg, address)
        signal.signal(signal.SIGTERM, _raise_interrupt)  # ray.init installed its own handler
        # Keys travel to the processes as Ray task arguments; they never touch a ZMQ socket.
        joined = ray_address(cfg, address) is not None
        curve = CurveKeys.generate() if cfg.launch.curve or joined else None
        sup = Supervisor(cfg, run_dir, resume=bool(resume), curve=curve)
        version = sup.version()
        if cfg.eval.every_updates:  # eval.every_updates: an evaluation actor (periodic_eval.py)
            evals = PeriodicEval(cfg, sup.endpoints["weights"], curve, version)
        # loop
        version, stop_reason = _train(cfg, sup, logger, evals)
    except KeyboardInterrupt:
        print("\n[launch] stopping: checkpoint and buffer snapshot ...", flush=True)
    except EnvFailing as e:
        stop_reason, failure = "env failing", str(e)
        print(f"[launch] stopping: {e}", file=sys.stderr, flush=True)
    finally:
        # stop
        try:
            wait_s = 600.0 if stop_reason in ("done", "max_wall_time_s") else 10.0
            for result in evals.stop(wait_s) if evals is not None else []:
                log_result(logger, result, step=version)  # the evaluation that was running
            ckpt = sup.shutdown(checkpoint=True) if sup is not None else None
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_ray()
    _say(f"{stop_reason}; checkpoint: {ckpt}")
    try:
        if cfg.eval.in_launch and ckpt and stop_reason in ("done", "max_wall_time_s"):
            held_out(cfg, run_dir, logger, "after", ckpt, step=version)
    except KeyboardInterrupt:
        print("\n[launch] held-out evaluation interrupted", flush=True)
    finally:
        logger.close()
    _report(run_dir)
    if logger.wandb_dir:
        _say(f"W&B run: {logger.wandb_dir} (sync with `wandb sync` when offline)")
    _say(f"run directory: {run_dir}")
    if failure:
        print(f"agent-r1-async: {failure}", file=sys.stderr, flush=True)
        return 1
    return 0 if stop_reason in ("done", "max_wall_time_s") else 130

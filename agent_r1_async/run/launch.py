"""`agent-r1-async launch`: the run's orchestration, start → loop → stop.

    start: preflight (preflight/) → run dir → warm start → held-out "before"
           → Ray → buffer, learner, N actors (processes/)
    loop:  one learner update at a time → merged metrics → W&B / metrics.jsonl / console,
           restarting an actor's loop when Ray restarted its process
    stop:  actors stop, the learner checkpoints, the buffer snapshots → held-out "after"
           → plots

Ctrl-C, SIGTERM and `launch.max_wall_time_s` stop gracefully. `--resume RUN_DIR` continues
from the latest checkpoint and buffer snapshot with the same W&B run. Local by default
(embedded Ray); `--address auto` or `RAY_ADDRESS` joins an existing cluster. Everything the
loop does not decide lives beside it: processes/ (Ray, hosts, supervision), preflight/
(what is checked before anything starts), output/ (console, events, logs, metric sinks, run
directory, report), warm_start.py and evaluate.py (held-out tables).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from agent_r1_async.config import RunConfig, dump_config
from agent_r1_async.disk import disk_full_line
from agent_r1_async.learner.checkpoint_files import checkpointed_update
from agent_r1_async.models import attention_implementation
from agent_r1_async.precision import describe as describe_precision
from agent_r1_async.run.evaluate import held_out
from agent_r1_async.run.output.console import Console, RlProgress, stage_messages
from agent_r1_async.run.output.episodes import EpisodeLog
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.output.histograms import BucketDeltas
from agent_r1_async.run.output.lines import one_line
from agent_r1_async.run.output.logs import descriptors_to, log_exception, quiet_driver
from agent_r1_async.run.output.metric_names import ActorRates, merge_metrics
from agent_r1_async.run.output.metrics import MetricsLogger
from agent_r1_async.run.output.metrics_file import last_logged_update
from agent_r1_async.run.output.run_dir import make_run_dir
from agent_r1_async.run.output.startup import StartupClock
from agent_r1_async.run.preflight.checks import preflight
from agent_r1_async.run.preflight.feasibility import cluster_fits
from agent_r1_async.run.processes.actor_group import actor_ids
from agent_r1_async.run.processes.leftovers import (
    forget_local_ray,
    reap_left_behind,
    record_local_ray,
)
from agent_r1_async.run.processes.periodic_eval import PeriodicEval, log_result
from agent_r1_async.run.processes.ray_cluster import (
    local_temp_dir,
    quiet_ray_driver,
    ray_address,
    ray_nodes,
    set_ray_auth,
    start_ray,
    stop_ray,
)
from agent_r1_async.run.processes.supervisor import EnvFailing, Supervisor
from agent_r1_async.run.warm_start import prepare_start
from agent_r1_async.wire.curve import RunKeys, keys_for
from agent_r1_async.wire.roles import EVALUATOR, LEARNER


def run_keys(cfg: RunConfig, address: str | None) -> RunKeys | None:
    """The run's own CurveZMQ keys: one client key pair for the learner and one per actor
    (their identities, wire/roles.py), generated fresh for every launch; None only with
    `launch.curve: false` on one machine (joining a cluster always authenticates)."""
    if not cfg.launch.curve and ray_address(cfg, address) is None:
        return None
    return RunKeys.generate([LEARNER, *actor_ids(cfg), *([EVALUATOR] if cfg.eval.every_updates else [])])


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops as Ctrl-C. `ray.init` replaces the process's SIGTERM
    handler with one that kills Ray's processes and exits at once (no checkpoint, no final
    snapshot), so launch installs this one again after Ray starts."""
    raise KeyboardInterrupt


def _open_run_dir(cfg: RunConfig, resume: str | None) -> Path:
    if not resume:
        return make_run_dir(cfg)
    run_dir = Path(resume).resolve()
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir


def _wandb_id(run_dir: Path, resume: str | None) -> str | None:
    path = run_dir / "wandb_run_id"
    return path.read_text().strip() if resume and path.exists() else None


def _train(cfg: RunConfig, sup: Supervisor, logger: MetricsLogger, console: Console,
           events: Events, evals: PeriodicEval | None = None,
           on_update: Callable[[], None] = lambda: None) -> tuple[int, str]:
    """The RL loop: (last version, why it stopped).

    Each update is logged once: after a learner restart from an older checkpoint (in the run,
    or `--resume` after a crash), the updates redone up to the last one logged keep their first
    record (W&B, too, takes each step once) and only print their progress line."""
    version = sup.version()
    logged = last_logged_update(logger.run_dir / "metrics.jsonl")
    rl = RlProgress(console, version, cfg.learner.total_updates, cfg.launch.max_wall_time_s)
    rates = ActorRates()
    lengths = BucketDeltas()
    samples = EpisodeLog(logger.run_dir, cfg.logging.episodes_keep, logger.log_table,
                         console.event)
    while version < cfg.learner.total_updates:
        update = sup.update(stop=rl.out_of_time)
        if update is None:  # the budget ran out while the learner waited for its batch
            events.wall_clock(cfg.launch.max_wall_time_s, version)
            return version, "max_wall_time_s"
        on_update()
        version = int(update["metrics"]["version"])
        buffer = sup.buffer_stats()
        sup.check_failures(buffer)
        record, hists = merge_metrics(update, buffer, rates)
        hists.update(lengths(record))
        redone = version <= logged
        if not redone:
            logger.log(record, step=version, histograms=hists)
            logged = version
            if logger.write_failure:  # metrics.jsonl cannot keep what the run does: stop now
                return version, "metrics write failed"
            samples.write(update.get("episodes") or [], step=version)
        console.update(record, suffix=" (redone)" if redone else "")
        events.after_update(record, buffer)
        if evals is not None:
            evals.follow(sup.endpoints["weights"])  # a restarted learner binds a new port
            for result in evals.poll():
                log_result(logger, result, step=version)
        rl.advance(version)
        if rl.out_of_time():
            events.wall_clock(cfg.launch.max_wall_time_s, version)
            return version, "max_wall_time_s"
    return version, "done"


def log_checkpointed_update(logger: MetricsLogger, run_dir: Path, console: Console,
                            why: str) -> int | None:
    """Log the newest checkpoint's own record of its update when metrics.jsonl lacks it
    (`MetricsLogger.log_checkpointed`), saying so with `why`; the update logged, or None.

    Two moments need it: opening a resumed run whose launcher was killed between the
    learner's checkpoint and the update's record, and the stop, whose final checkpoint waits
    behind an update in progress (the wall-clock budget ran out during it): that update's
    weights are in the checkpoint, and its record would otherwise be missing."""
    done = logger.log_checkpointed(checkpointed_update(run_dir / "checkpoints"))
    if done is not None:
        console.say(f"update {done}: logged from its checkpoint ({why})")
    return done


def _report(run_dir: Path, console: Console) -> None:
    try:
        from agent_r1_async.run.output.report import write_report

        for p in write_report(run_dir):
            console.say(f"plot: {p}")
    except Exception as e:  # plots are a convenience; never fail a finished run on them
        console.error(f"report failed: {e!r}")


def _stop(sup: Supervisor | None, evals: PeriodicEval | None, wait_s: float,
          logger: MetricsLogger, version: int, console: Console, run_dir: Path) -> str | None:
    """The stop's steps (the running evaluation, then `Supervisor.shutdown`, each bounded) in a
    thread, so that the main thread stays free: a second Ctrl-C or SIGTERM meanwhile ends the
    launch at once, saying what is left unsaved (`_force_exit`). The final checkpoint's path."""
    done: dict[str, Any] = {}

    def steps() -> None:
        try:
            for result in evals.stop(wait_s) if evals is not None else []:
                log_result(logger, result, step=version)  # the evaluation that was running
            done["checkpoint"] = sup.shutdown(checkpoint=True) if sup is not None else None
        except BaseException as e:  # handed to the main thread, raised there
            done["error"] = e

    thread = threading.Thread(target=steps, name="launch-stop", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        _force_exit(sup, console, run_dir)
    if "error" in done:
        raise done["error"]
    return done.get("checkpoint")


def _force_exit(sup: Supervisor | None, console: Console, run_dir: Path) -> NoReturn:
    """A second interrupt during the stop: say what is not saved, end Ray (bounded), exit 130."""
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    unsaved = list(sup.unsaved) if sup is not None else []
    if "the learner checkpoint" in unsaved:
        try:
            last = latest_checkpoint(str(run_dir))
            since = f"since {last}" if last else "of this run (no periodic checkpoint)"
        except Exception:  # nothing may stop a forced exit
            since = "since the last periodic checkpoint"
        unsaved[unsaved.index("the learner checkpoint")] = (
            f"the learner checkpoint (the updates {since} are lost)")
    console.error("second interrupt: exiting now; not saved: " + (", ".join(unsaved) or "nothing"))
    ender = threading.Thread(target=stop_ray, name="launch-stop-ray", daemon=True)
    ender.start()
    ender.join(15.0)
    console.close()
    sys.stdout.flush()
    os._exit(130)


def lost_final_checkpoint(error: str, run_dir: Path) -> str:
    """The failure of a run whose final checkpoint failed (it exits 1, not 0): the updates
    since the last periodic checkpoint are lost, and a script must not take it for done."""
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    last = latest_checkpoint(str(run_dir))
    since = f"the last periodic checkpoint ({last})" if last else "the start (no periodic checkpoint)"
    return f"the final checkpoint failed ({error}): the updates since {since} are lost"


def launch(cfg: RunConfig, address: str | None = None, resume: str | None = None,
           force: bool = False, fresh: bool = False) -> int:
    """The whole run (module docstring); `force`: go on when the memory check says the run
    does not fit this machine, or when no node up now can host a role (an autoscaler may add
    one); `fresh`: `resume` has no checkpoint yet, train it from update 0."""
    clock = StartupClock()
    logging.raiseExceptions = False  # a log write on a full disk: no "Logging error" traceback
    preflight(cfg, address, resume, memory=True, force=force, fresh=fresh)
    run_dir = _open_run_dir(cfg, resume)
    clock.write_to(run_dir)
    clock.mark("preflight")
    console = Console(run_dir / "logs", per_update=cfg.logging.console)
    set_ray_auth(ray_address(cfg, address))  # before anything imports ray
    if not cfg.logging.verbose:
        quiet_driver(run_dir / "logs" / "launch.log")
        quiet_ray_driver()
    try:
        return _launch(cfg, run_dir, console, address, resume, clock, force)
    finally:
        console.close()


def _launch(cfg: RunConfig, run_dir: Path, console: Console, address: str | None,
            resume: str | None, clock: StartupClock, force: bool = False) -> int:
    console.say(f"run directory: {run_dir}")
    if not cfg.logging.verbose:
        console.say(f"logs of every process: {run_dir / 'logs'}/ (--verbose: here too)")
    attn, why = attention_implementation(cfg.learner.device, cfg.learner.flash_attention)
    console.say(f"learner attention: {attn} ({why})")
    console.say(describe_precision(cfg.engine, cfg.learner, model=cfg.model.name_or_path))
    logger = MetricsLogger(cfg, run_dir, resume_id=_wandb_id(run_dir, resume))
    log_checkpointed_update(logger, run_dir, console, "the launcher stopped before logging it")
    events = Events(console, run_dir, cfg.actors.num_actors, cfg.buffer.max_staleness)
    sup: Supervisor | None = None
    evals: PeriodicEval | None = None
    ckpt, version, stop_reason, failure = None, 0, "interrupted", ""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    # SIGINT stops gracefully even where the launch was started with it ignored (a shell
    # starts `cmd &` so, and Python then installs no KeyboardInterrupt handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # start
        cfg = prepare_start(cfg, run_dir, on_message=stage_messages(console, cfg))
        console.finish("warm-start")  # cached: no steps were reported
        clock.mark("warm start")
        if cfg.eval.in_launch and not resume:
            held_out(cfg, run_dir, logger, "before", cfg.model.start_from, step=0,
                     console=console, cached=True)
            clock.mark("evaluation before")
        if resume:
            ended = reap_left_behind(run_dir)
            if ended:
                console.say(f"ended {len(ended)} Ray process(es) the killed launch left "
                            f"behind: {', '.join(ended)}")
        with contextlib.nullcontext() if cfg.logging.verbose else descriptors_to(
                run_dir / "logs" / "launch.log"):
            start_ray(cfg, address)
        if ray_address(cfg, address) and not force:  # a cluster: its nodes are known now
            cluster_fits(cfg, ray_nodes())  # --force: nodes an autoscaler adds later
        clock.mark("ray")
        signal.signal(signal.SIGTERM, _raise_interrupt)  # ray.init installed its own handler
        # Keys travel to the processes as Ray task arguments; they never touch a ZMQ socket.
        curve = run_keys(cfg, address)
        sup = Supervisor(cfg, run_dir, resume=bool(resume), curve=curve, events=events)
        sup.write_endpoints()
        if not ray_address(cfg, address):
            record_local_ray(run_dir, local_temp_dir())
        clock.mark("processes")
        if cfg.eval.every_updates:  # eval.every_updates: an evaluation actor (periodic_eval.py)
            evals = PeriodicEval(cfg, sup.endpoints["weights"], keys_for(curve, EVALUATOR),
                                 sup.version(), str(run_dir / "logs"))
        # loop
        version, stop_reason = _train(cfg, sup, logger, console, events, evals,
                                      on_update=lambda: clock.mark("first update"))
    except KeyboardInterrupt:
        console.say("stopping: checkpoint and buffer snapshot ...")
    except EnvFailing as e:
        stop_reason, failure = "env failing", str(e)
        console.error(f"stopping: {e}")
    except Exception as e:  # one line here, the traceback in the driver's own log
        full = disk_full_line(e, run_dir)  # say so and where, not the OS's or torch's error
        stop_reason, failure = ("disk full", full) if full else ("failed", one_line(e))
        log = None if full else log_exception(run_dir / "logs" / "launch.log")
        console.error(f"stopping: {failure}", log=log)
    finally:
        # stop
        try:
            wait_s = 600.0 if stop_reason in ("done", "max_wall_time_s") else 10.0
            ckpt = _stop(sup, evals, wait_s, logger, version, console, run_dir)
            if ckpt:  # an update the stop waited for is in it, and not yet logged
                version = log_checkpointed_update(logger, run_dir, console,
                                                  "it finished during the stop") or version
            if sup is not None and sup.checkpoint_error and not failure:
                failure = lost_final_checkpoint(sup.checkpoint_error, run_dir)
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_ray()
            forget_local_ray(run_dir)
    console.finish("rl")
    console.say(f"{stop_reason}; checkpoint: {ckpt}")
    try:
        if cfg.eval.in_launch and ckpt and stop_reason in ("done", "max_wall_time_s"):
            held_out(cfg, run_dir, logger, "after", ckpt, step=version, console=console)
    except KeyboardInterrupt:
        console.say("held-out evaluation interrupted")
    finally:
        logger.close()
    if logger.write_failure and logger.write_failure not in failure:
        console.error(logger.write_failure)
        failure = failure or logger.write_failure
    _report(run_dir, console)
    for line in logger.closing_lines():
        console.say(line)
    console.say(f"run directory: {run_dir}")
    if failure:
        print(f"agent-r1-async: {failure}", file=sys.stderr, flush=True)
        return 1
    return 0 if stop_reason in ("done", "max_wall_time_s") else 130

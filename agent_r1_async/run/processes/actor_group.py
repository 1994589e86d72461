"""The actors under supervision: `actors.num_actors` ActorHost Ray actors, each running the
actor loop (actors/actor.py), restarted when they die and replaced when they hang.

- An actor whose process dies is restarted by Ray (up to `actors.max_restarts`; one death
  more fails the launch). `check` sees the death when the loop's pending `run()` call fails
  (a loop that raises counts the same as a crash), has the buffer give back what the old
  process held (`EpisodeBuffer.reclaim`: its credits and unfinished episodes, so the other
  actors get credits at once instead of after `buffer.episode_timeout_s`), waits until Ray
  has brought it back (at most 300 s), hands it the current endpoints (Ray re-ran its
  constructor with the launch's) and re-runs its loop.
- An unresponsive actor (liveness.py: its reports show no progress for
  `launch.unresponsive_s`) is replaced (`watch`): the buffer reclaims what it held, then its
  process is killed through Ray (`ray.kill(no_restart=False)`, which kills a stopped process
  too) for Ray to restart within `actors.max_restarts`, and the death path re-runs its loop.
  It costs the in-flight work of one actor that would never have finished it.
- `restart_loops` stops every loop, gives back what each held and re-runs it against new
  endpoints (a restarted learner group, a buffer that moved).
- Each restart line says what the buffer discarded with it (`discarded in flight: ...`,
  buffers/lengths.py `Loss`): an actor's, what its reclaims dropped; the loops', what the
  buffer dropped while they restarted (its length counts before and after).

`ActorHost` is the process: it gives its `Actor` a ZeroMQ transport of its own, pins its torch
threads to the CPUs Ray reserved and writes `RUN_DIR/actor-N.pid` (rewritten by each process
Ray restarts).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_r1_async.buffers.lengths import Loss
from agent_r1_async.config import RunConfig
from agent_r1_async.run.output.lines import one_line
from agent_r1_async.run.output.logs import log_to, own_log
from agent_r1_async.run.processes.forensics import process_death
from agent_r1_async.run.processes.liveness import Liveness
from agent_r1_async.run.processes.nodes import Host, Where, pin_threads
from agent_r1_async.wire.curve import RunKeys, keys_for
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport

if TYPE_CHECKING:
    from agent_r1_async.run.output.events import Events
    from agent_r1_async.run.processes.buffer_group import SupervisedBuffer

RECLAIM_TIMEOUT_S = 10.0


def actor_ids(cfg: RunConfig) -> list[str]:
    """The actors' ids, which are also their CurveZMQ identities (wire/roles.py)."""
    return [f"actor-{i}" for i in range(cfg.actors.num_actors)]


class ActorHost(Host):
    """One actor's process: its `Actor` loop on the run's endpoints until `stop`."""

    def __init__(
        self, cfg: RunConfig, actor_id: str, endpoints: dict[str, str], curve: CurveKeys | None,
        log_dir: str | None = None,
    ) -> None:
        if log_dir and not cfg.logging.verbose:  # everything this process says: its own file
            own_log(cfg, log_dir, actor_id)
        elif log_dir:  # env errors (logged once each) reach RUN_DIR/logs/ and the console
            log_to(os.path.join(log_dir, f"{actor_id}.log"))
        pin_threads(cfg.actors.num_cpus)
        self.cfg = cfg
        self.curve = curve
        self.actor_id = actor_id
        self.endpoints = endpoints
        self._stop = threading.Event()
        if log_dir:  # RUN_DIR/actor-N.pid, rewritten by each process Ray restarts
            with contextlib.suppress(OSError):
                (Path(log_dir).parent / f"{actor_id}.pid").write_text(str(os.getpid()))

    def set_endpoints(self, endpoints: dict[str, str]) -> None:
        """A restarted learner group publishes weights elsewhere: the next `run` uses these."""
        self.endpoints = endpoints
        self._stop = threading.Event()

    def run(self) -> str:
        """Run the actor loop until `stop()`; returns the actor id (so the launcher can tell)."""
        from agent_r1_async.actors.actor import Actor

        actor = Actor(
            self.cfg,
            self.actor_id,
            ZmqTransport(curve=self.curve),
            data_endpoint=self.endpoints["data"],
            control_endpoint=self.endpoints["control"],
            weights_endpoint=self.endpoints["weights"],
        )
        actor.run(stop=self._stop)
        return self.actor_id

    def stop(self) -> None:
        self._stop.set()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _actor_doing(actor_id: str, stats: dict[str, Any]) -> str:
    """What an actor was last doing, from the buffer's stats."""
    credits = _count(int(stats.get("actor_credits", {}).get(actor_id, 0)), "credit")
    report = stats.get("actors", {}).get(actor_id)
    if report is None:
        return f"no report yet, {credits} held"
    return (f"last report at v{int(report['policy_version'])}, "
            f"{_count(int(report['episodes_in_flight']), 'episode')} in flight, {credits} held")


class ActorGroup:
    """The actors' Ray actors (`handles`), their pending loops (`runs`, ref -> index) and their
    restarts (module docstring). `endpoints` is the run's sockets now: the supervisor's dict,
    updated in place when the buffer moves or the learner restarts. `place(role, where)` notes
    where a (re)started actor runs. Calls to the buffer name the learner's version
    (`learner_version`), which a buffer restarted meanwhile is told."""

    def __init__(self, cfg: RunConfig, run_dir: Path, endpoints: dict[str, str],
                 curve: RunKeys | None, buffers: SupervisedBuffer, events: Events,
                 liveness: Liveness, place: Callable[[str, Where], None]) -> None:
        import ray

        self.ray, self.cfg, self.run_dir, self.endpoints = ray, cfg, run_dir, endpoints
        self.buffers, self.events, self.liveness, self.place = buffers, events, liveness, place
        actor_cls = ray.remote(
            num_cpus=cfg.actors.num_cpus,
            num_gpus=cfg.actors.num_gpus,
            resources=dict(cfg.actors.resources),
            max_restarts=cfg.actors.max_restarts,
            max_concurrency=2,
            scheduling_strategy="SPREAD",  # over the nodes that can host one
        )(ActorHost)
        self.handles = [  # each actor with its own client key and no server secret
            actor_cls.remote(cfg, a, endpoints, keys_for(curve, a), str(run_dir / "logs"))
            for a in actor_ids(cfg)
        ]
        self.runs = {a.run.remote(): i for i, a in enumerate(self.handles)}
        self.restarts = [0] * len(self.handles)
        self.replacing: dict[int, str] = {}
        """Actors the launcher killed for being unresponsive -> the cause their death says."""
        self.discarded: dict[int, Loss] = {}
        """Actors reclaimed before their death -> what that reclaim discarded (their restart
        line says it)."""

    def where(self) -> list[Where]:
        """Each actor's node, in actor order."""
        nodes: list[Where] = self.ray.get([a.where.remote() for a in self.handles])
        return nodes

    def check(self, learner_version: int | None) -> None:
        """Re-run the loop of an actor whose process died (Ray restarted it, or is restarting
        the one the launcher killed for being unresponsive); what the old process held in the
        buffer comes back first."""
        done, _ = self.ray.wait(list(self.runs), timeout=0, num_returns=len(self.runs))
        for ref in done:
            i = self.runs.pop(ref)
            actor_id = f"actor-{i}"
            try:
                self.ray.get(ref)
                continue  # finished normally (stopped)
            except Exception as e:  # the process died, or the actor's loop raised: a crash
                cause = (self.replacing.pop(i, None)
                         or process_death(e, self.events.actor_log(actor_id)))
                self.events.actor_died(actor_id, cause, self.restarts[i] + 1)
                reason = f"{actor_id} died: {cause}"
            self.restarts[i] += 1
            if self.restarts[i] > self.cfg.actors.max_restarts:
                raise RuntimeError(f"{reason}; restarted {self.cfg.actors.max_restarts} times")
            got = self.reclaim(actor_id, learner_version)
            before = self.discarded.pop(i, None)  # reclaimed when it was found unresponsive
            discarded = None if got is None else Loss.from_counts(got) + (before or Loss())
            self._wait_restarted(i, reason)
            # Ray re-ran its constructor with the endpoints of launch time; a learner restarted
            # since then publishes weights elsewhere.
            self.ray.get(self.handles[i].set_endpoints.remote(self.endpoints))
            self.place(actor_id, self.ray.get(self.handles[i].where.remote()))
            self.events.actor_restarted(actor_id, self.restarts[i], self.cfg.actors.max_restarts,
                                        discarded)
            self.liveness.forget(actor_id)
            self.runs[self.handles[i].run.remote()] = i

    def reclaim(self, actor_id: str, learner_version: int | None) -> dict[str, int] | None:
        """The buffer gives back what `actor_id`'s old process held (`EpisodeBuffer.reclaim`):
        {"credits": n, "episodes": n} and what it discarded (`lengths.Loss.to_counts`); None
        when the buffer did not answer (the credits then expire after
        buffer.episode_timeout_s)."""
        try:
            got: dict[str, int] = self.buffers.call("reclaim", actor_id, timeout=RECLAIM_TIMEOUT_S,
                                                    learner_version=learner_version)
            return got
        except Exception as e:
            self.events.console.error(f"reclaiming {actor_id}'s credits failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
            return None

    def watch(self, stats: dict[str, Any], learner_version: int | None) -> None:
        """Judge each actor by its silence in the buffer's `stats`; replace an unresponsive one:
        its credits and unfinished episodes back to the buffer, its process killed for Ray to
        restart (`check` then re-runs its loop)."""
        silence = stats.get("actor_silence_s", {})
        for i in range(len(self.handles)):
            actor_id = f"actor-{i}"
            if i in self.replacing:
                continue
            change = self.liveness.observe(actor_id, silence.get(actor_id))
            if change is None or change[0] != "unresponsive":
                continue
            doing = _actor_doing(actor_id, stats)
            got = self.reclaim(actor_id, learner_version)
            if got is not None:
                self.discarded[i] = Loss.from_counts(got)
            then = (f"reclaimed {_count(got['credits'], 'credit')} and "
                    f"{_count(got['episodes'], 'unfinished episode')}" if got is not None else
                    "not reclaimed (its credits expire after buffer.episode_timeout_s)")
            self.events.unresponsive(actor_id, change[1], doing,
                                     f"{then}; killing its process for Ray to restart")
            self.replacing[i] = f"killed by the launcher: unresponsive for {change[1]:.0f} s"
            try:
                self.ray.kill(self.handles[i], no_restart=False)
            except Exception as e:  # its death (if any) still comes through check
                self.replacing.pop(i, None)
                self.events.console.error(f"killing {actor_id} failed: {one_line(e)}",
                                          log=self.events.actor_log(actor_id))

    def _wait_restarted(self, i: int, reason: str, timeout_s: float = 300.0) -> None:
        """Block until Ray has brought actor i back (a call submitted while it is restarting
        fails with ActorUnavailableError, "may or may not have been executed": re-running the
        loop then would count a second crash, or start a second loop in the same process)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.ray.get(self.handles[i].pid.remote(), timeout=30)
                return
            except (self.ray.exceptions.ActorUnavailableError,
                    self.ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{reason}; not back after {timeout_s:.0f} s") from None
                time.sleep(0.5)

    def stop(self, wait_s: float) -> None:
        """Tell every actor to stop (10 s each; in-flight episodes end `aborted` and still send
        their end records), then wait up to `wait_s` for the loops to return."""
        for a in self.handles:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to stop
                self.ray.get(a.stop.remote(), timeout=10)
        self.ray.wait(list(self.runs), timeout=wait_s, num_returns=len(self.runs))

    def _buffer_drops(self, learner_version: int | None) -> dict[str, int] | None:
        """The buffer's `drops` now, its length counts included; None without an answer."""
        try:
            stats = self.buffers.call("stats", timeout=RECLAIM_TIMEOUT_S,
                                      learner_version=learner_version)
            return {str(k): int(v) for k, v in stats["drops"].items()}
        except Exception:  # what was discarded is then not said; nothing else depends on it
            return None

    def restart_loops(self, learner_version: int | None) -> Loss | None:
        """Stop every actor's loop, give back what each held in the buffer and re-run the loops
        against the current endpoints. Returns what the buffer discarded meanwhile (the
        stopped loops' aborted episodes and the reclaimed ones, by the buffer's length counts
        before and after), or the sum of the reclaims' when the buffer gave no counts; None
        when neither is known."""
        before = self._buffer_drops(learner_version)
        reclaimed: Loss | None = Loss()
        self.stop(wait_s=60)
        self.replacing.clear()  # a killed one is waited for below like any other
        self.discarded.clear()
        for i, a in enumerate(self.handles):  # one that Ray is restarting answers once back
            got = self.reclaim(f"actor-{i}", learner_version)  # the old loop's leftovers
            reclaimed = None if got is None or reclaimed is None else (
                reclaimed + Loss.from_counts(got))
            self.liveness.forget(f"actor-{i}")  # judged once it reports
            self._wait_restarted(i, f"actor-{i} (restarting its loop against new endpoints)")
            self.ray.get(a.set_endpoints.remote(self.endpoints))
            self.place(f"actor-{i}", self.ray.get(a.where.remote()))
        self.runs = {a.run.remote(): i for i, a in enumerate(self.handles)}
        after = self._buffer_drops(learner_version) if before is not None else None
        if before is None or after is None:
            return reclaimed
        return Loss.between(before, after)

"""Place the three roles and keep them running (Ray itself: ray_cluster.py).

    Supervisor(cfg, run_dir, resume, curve)
      ├─ BufferHost   ray actor: PULL records, ROUTER credits/samples, snapshots; restarted
      │               from its snapshot on the same endpoints when it dies
      │               (buffer_group.py, up to buffer.max_restarts)
      ├─ LearnerGroup learner.world_size LearnerHost ray actors in one placement group
      │               (learner_group.py)
      │               (one bundle per rank): rank 0 samples, PUBlishes weights; all train
      └─ ActorHost×N  ray actors (restarted by Ray up to actors.max_restarts): episodes

The learner ranks are supervised as one unit: when one dies the others are stuck in a
collective, so the whole group is killed and rebuilt from the last checkpoint (up to
`learner.max_restarts` times), and the actors' loops restart against the new weights socket.

Liveness. A process can be alive and stuck: stopped (SIGSTOP, a debugger), its event loop
blocked in C code, an engine step that never returns. Ray sees no death then, so each role
proves progress where it does its work:
- an actor through its reports to the buffer, which say when an engine or env call last
  returned (actors/stats.py); the buffer measures the silence in its own listening time
  (buffers/buffer.py), so a stalled buffer never makes its actors look hung; an actor is
  judged from its first report after its loop (re)starts, never while its engine loads;
- the buffer by answering the launcher's stats request, served under its loop's lock;
- each learner rank by answering `progress()` on Ray's second thread, which says what its
  worker thread runs (an update, a checkpoint) and for how long.
`Liveness` alone decides, against `launch.unresponsive_s`; the console says it once per
spell of silence, and again when a buffer or learner answers after it.

- An unresponsive actor is replaced. The buffer reclaims its credits and unfinished episodes
  (`TrajectoryBuffer.reclaim`, the one place that gives credits back early; the same is done
  for every actor whose process died or whose loop restarts), so the other actors get credits
  at once instead of after `buffer.episode_timeout_s`; then its process is killed through Ray
  (`ray.kill(no_restart=False)`, which kills a stopped process too) for Ray to restart within
  `actors.max_restarts`, and the death path re-runs its loop. It costs the in-flight work of
  one actor that would never have finished it.
- Each restart line says what the buffer discarded with it (`discarded in flight: ...`,
  `buffers/lengths.py` `Loss`): an actor's, what its reclaims dropped; the learner's, what the
  buffer dropped while the actors' loops restarted (its length counts before and after); the
  buffer's, the untrained episodes with a record since its snapshot (buffer_group.py).
- An unresponsive buffer or learner is named, and never killed for it: (1) neither loses
  anything by waiting, a stopped one resumes where it stood (0.5 s after SIGCONT in the
  drill), while a restart costs the groups since the last snapshot or the updates since the
  last checkpoint; (2) from outside, stopped and slow look alike: a learner holding the GIL in
  a long C call, or a buffer writing a large snapshot under its lock, does not answer either,
  and a learner in a long update or checkpoint must never be killed; (3) the ones truly gone
  are Ray's deaths, restarted as above, and an operator who knows one is hung SIGKILLs it
  (its pid is in RUN_DIR) and the same path restarts it. A learner rank that answers is
  alive by this measure even when its update never ends (a collective waiting on a peer):
  the update's own bounds end that (`learner.sample_timeout_s` for data, the process
  group's 1,800 s collective timeout, learner/distributed.py), and a rank that then fails is
  a death, restarted as above.

Only small control values cross Ray (endpoints, metric dicts); data moves over ZeroMQ.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.lengths import Loss
from agent_r1_async.config import RunConfig
from agent_r1_async.learner.checkpoint_files import disk_full_message
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events, one_line
from agent_r1_async.run.processes.buffer_group import SupervisedBuffer
from agent_r1_async.run.processes.learner_group import LearnerGroup
from agent_r1_async.run.processes.nodes import NodeWatch, placement_line
from agent_r1_async.wire.curve import RunKeys, keys_for


def actor_ids(cfg: RunConfig) -> list[str]:
    """The actors' ids, which are also their CurveZMQ identities (wire/roles.py)."""
    return [f"actor-{i}" for i in range(cfg.actors.num_actors)]


class EnvFailing(RuntimeError):
    """Every recent episode failed: the run stops instead of waiting for batches."""


_PROBE_EVERY_S = 2.0
"""How often the launcher asks the buffer for its stats (failures, stalls, the actors'
silence) and each learner rank for its progress, while it waits for an update."""
_RECLAIM_TIMEOUT_S = 10.0


class Liveness:
    """The one place that decides which process is unresponsive (`launch.unresponsive_s`).

    `observe(role, silent_s)` is told, at each look, how long `role` has shown no progress;
    None means nothing is known (an actor with no report since its loop started): the role is
    not judged and what was said of it is forgotten. It returns ("unresponsive", seconds)
    once, when the silence reaches the bound, and ("back", seconds silent) once, when a role
    named so shows progress again; else None. A bound of 0 judges nothing.
    """

    def __init__(self, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound_s, self.clock = bound_s, clock
        self._began: dict[str, float] = {}
        """Roles named unresponsive -> when their silence began."""

    def observe(self, role: str, silent_s: float | None) -> tuple[str, float] | None:
        if silent_s is None or self.bound_s <= 0:
            self.forget(role)
            return None
        now = self.clock()
        began = self._began.get(role)
        if began is None:
            if silent_s < self.bound_s:
                return None
            self._began[role] = now - silent_s
            return "unresponsive", silent_s
        if silent_s >= self.bound_s:
            return None
        del self._began[role]
        return "back", max(0.0, now - silent_s - began)

    def forget(self, role: str) -> None:
        """A role replaced by a new process: what was said of the old one no longer holds."""
        self._began.pop(role, None)


class _Probe:
    """One Ray call to a process kept pending at a time: how long it has gone unanswered is
    that process's silence (`silent_s`); a new call goes out `every_s` after an answer."""

    def __init__(self, ray: Any, call: Callable[[], Any], every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ray, self.call, self.every_s, self.clock = ray, call, every_s, clock
        self.ref: Any = None
        self.sent_at = self.next_at = 0.0

    def poll(self, timeout_s: float = 0.0) -> tuple[bool, Any]:
        """(True, the answer) when one came; (False, None) while none did. An answer that is
        an error (the process died) raises here."""
        now = self.clock()
        if self.ref is None:
            if now < self.next_at:
                return False, None
            self.ref, self.sent_at = self.call(), now
        ready, _ = self.ray.wait([self.ref], timeout=timeout_s)
        if not ready:
            return False, None
        ref, self.ref = self.ref, None
        self.next_at = self.clock() + self.every_s
        return True, self.ray.get(ref)

    def due_now(self) -> None:
        """Ask now (if no call is pending): the caller wants a fresh answer."""
        self.next_at = 0.0

    def silent_s(self) -> float:
        return 0.0 if self.ref is None else self.clock() - self.sent_at


def _learner_role(rank: int, world_size: int) -> str:
    return "learner" if world_size == 1 else f"learner rank {rank}"


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


class Supervisor:
    """Starts the processes and keeps all three roles alive (buffer, learner group, actors)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool, curve: RunKeys | None,
                 events: Events | None = None) -> None:
        import ray

        from agent_r1_async.run.processes.hosts import ActorHost

        self.cfg = cfg
        self.unsaved: list[str] = []  # what a forced exit now would leave unsaved (shutdown)
        self.ray = ray
        self.run_dir, self.curve = run_dir, curve
        self.events = events or Events(Console(run_dir / "logs"), run_dir, cfg.actors.num_actors,
                                       cfg.buffer.max_staleness)
        self.learner_restarts = 0
        self.checkpoint_error: str | None = None
        """Why the final checkpoint (`shutdown`) failed, if it did: `launch` exits 1 with it."""
        self.buffers = SupervisedBuffer(cfg, run_dir, keys_for(curve, None, binds=True), resume)
        self.endpoints: dict[str, str] = dict(self.buffers.endpoints)
        # The learner loads its model while the actors start their engines (both take seconds).
        self.learner = LearnerGroup(cfg, run_dir, self.endpoints["control"], resume, curve,
                                    wait=False)
        self.endpoints["weights"] = ray.get(self.learner.leader.weights_endpoint.remote())
        actor_cls = ray.remote(
            num_cpus=cfg.actors.num_cpus,
            num_gpus=cfg.actors.num_gpus,
            resources=dict(cfg.actors.resources),
            max_restarts=cfg.actors.max_restarts,
            max_concurrency=2,
            scheduling_strategy="SPREAD",  # over the nodes that can host one
        )(ActorHost)
        self.actors = [  # each actor with its own client key and no server secret
            actor_cls.remote(cfg, a, self.endpoints, keys_for(curve, a), str(run_dir / "logs"))
            for a in actor_ids(cfg)
        ]
        self.runs = {a.run.remote(): i for i, a in enumerate(self.actors)}
        self.restarts = [0] * len(self.actors)
        self.liveness = Liveness(cfg.launch.unresponsive_s)
        self.replacing: dict[int, str] = {}
        """Actors the launcher killed for being unresponsive -> the cause their death says."""
        self.discarded: dict[int, Loss] = {}
        """Actors reclaimed before their death -> what that reclaim discarded (their restart
        line says it)."""
        self._buffer_probe = _Probe(ray, lambda: self.buffer.stats.remote(), _PROBE_EVERY_S)
        self._last_stats: dict[str, Any] = {}
        self._learner_seen: dict[int, dict[str, Any]] = {}
        self.learner.wait_started()
        self.last_version = self.version()
        """The learner's version after its last update (a restarted buffer is told it)."""
        self.nodes = NodeWatch(ray.nodes)
        """Each process's node (`placement_line`, node-loss events)."""
        self.nodes.place("buffer", self.buffers.where)
        self._locate_learner()
        for i, w in enumerate(ray.get([a.where.remote() for a in self.actors])):
            self.nodes.place(f"actor-{i}", w)
        if len(self.nodes.alive) > 1:
            self.events.console.say(f"placement: {placement_line(self.nodes.where)}")
        if resume:
            self.learner.call("publish")

    def _locate_learner(self) -> None:
        ranks = self.ray.get([r.where.remote() for r in self.learner.ranks])
        for rank, w in enumerate(ranks):
            self.nodes.place(_learner_role(rank, len(ranks)), w)

    @property
    def buffer(self) -> Any:
        """The buffer's current Ray actor handle (a new one after a restart)."""
        return self.buffers.handle

    def check_actors(self) -> None:
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
                cause = self.replacing.pop(i, None)
                reason = (f"{actor_id} died: "
                          f"{self.events.actor_died(actor_id, e, self.restarts[i] + 1, cause)}")
            self.restarts[i] += 1
            if self.restarts[i] > self.cfg.actors.max_restarts:
                raise RuntimeError(f"{reason}; restarted {self.cfg.actors.max_restarts} times")
            got = self.reclaim(actor_id)
            before = self.discarded.pop(i, None)  # reclaimed when it was found unresponsive
            discarded = None if got is None else Loss.from_counts(got) + (before or Loss())
            self._wait_restarted(i, reason)
            # Ray re-ran its constructor with the endpoints of launch time; a learner restarted
            # since then publishes weights elsewhere.
            self.ray.get(self.actors[i].set_endpoints.remote(self.endpoints))
            self.nodes.place(actor_id, self.ray.get(self.actors[i].where.remote()))
            self.events.actor_restarted(actor_id, self.restarts[i], self.cfg.actors.max_restarts,
                                        discarded)
            self.liveness.forget(actor_id)
            self.runs[self.actors[i].run.remote()] = i

    def reclaim(self, actor_id: str) -> dict[str, int] | None:
        """The buffer gives back what `actor_id`'s old process held (`TrajectoryBuffer.reclaim`):
        {"credits": n, "episodes": n} and what it discarded (`lengths.Loss.to_counts`); None
        when the buffer did not answer (the credits then expire after
        buffer.episode_timeout_s)."""
        try:
            got: dict[str, int] = self.buffers.call("reclaim", actor_id, timeout=_RECLAIM_TIMEOUT_S,
                                                    learner_version=self.last_version)
            return got
        except Exception as e:
            self.events.console.error(f"reclaiming {actor_id}'s credits failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
            return None

    def watch_actors(self, stats: dict[str, Any]) -> None:
        """Judge each actor by its silence in the buffer's `stats`; replace an unresponsive one:
        its credits and unfinished episodes back to the buffer, its process killed for Ray to
        restart (`check_actors` then re-runs its loop)."""
        silence = stats.get("actor_silence_s", {})
        for i in range(len(self.actors)):
            actor_id = f"actor-{i}"
            if i in self.replacing:
                continue
            change = self.liveness.observe(actor_id, silence.get(actor_id))
            if change is None or change[0] != "unresponsive":
                continue
            doing = _actor_doing(actor_id, stats)
            got = self.reclaim(actor_id)
            if got is not None:
                self.discarded[i] = Loss.from_counts(got)
            then = (f"reclaimed {_count(got['credits'], 'credit')} and "
                    f"{_count(got['episodes'], 'unfinished episode')}" if got is not None else
                    "not reclaimed (its credits expire after buffer.episode_timeout_s)")
            self.events.unresponsive(actor_id, change[1], doing,
                                     f"{then}; killing its process for Ray to restart")
            self.replacing[i] = f"killed by the launcher: unresponsive for {change[1]:.0f} s"
            try:
                self.ray.kill(self.actors[i], no_restart=False)
            except Exception as e:  # its death (if any) still comes through check_actors
                self.replacing.pop(i, None)
                self.events.console.error(f"killing {actor_id} failed: {one_line(e)}",
                                          log=self.events.actor_log(actor_id))

    def _judge(self, role: str, silent_s: float | None, doing: str) -> None:
        """The buffer or a learner rank: said when unresponsive, and when it answers again."""
        change = self.liveness.observe(role, silent_s)
        if change is not None and change[0] == "unresponsive":
            self.events.unresponsive(role, change[1], doing)
        elif change is not None:
            self.events.responsive_again(role, change[1])

    def poll_buffer(self, timeout_s: float = 0.0) -> dict[str, Any] | None:
        """The buffer's stats when an answer came within `timeout_s` (None otherwise; a new
        request goes out every `_PROBE_EVERY_S`); each look judges the buffer, each answer the
        actors. A dead buffer is restarted (`SupervisedBuffer.call`) and asked again."""
        died = (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError)
        try:
            answered, stats = self._buffer_probe.poll(timeout_s)
        except died:
            answered, stats = True, self.buffers.call("stats", learner_version=self.last_version)
        last = self._last_stats
        self._judge("buffer", self._buffer_probe.silent_s(),
                    f"no answer to the launcher since it was at version "
                    f"{last.get('learner_version', '?')} (groups: {last.get('groups_ready', '?')} "
                    f"ready, {last.get('in_flight_groups', '?')} in flight); log: "
                    f"{self.run_dir / 'logs' / 'buffer.log'}")
        if not answered:
            return None
        self._last_stats = stats
        self.buffers.seen(stats)
        self.watch_actors(stats)
        return stats

    def _learner_probes(self) -> list[_Probe]:
        return [_Probe(self.ray, rank.progress.remote, _PROBE_EVERY_S) for rank in self.learner.ranks]

    def _watch_learner(self, probes: list[_Probe]) -> None:
        """Each learner rank answering `progress()` (run/processes/hosts.py), or named."""
        for rank, probe in enumerate(probes):
            try:
                answered, seen = probe.poll()
            except Exception:  # a dead rank: its update's reference says so
                continue
            if answered:
                self._learner_seen[rank] = seen
            last = self._learner_seen.get(rank)
            doing = (f"its last answer: {last['doing']} for {float(last['for_s']):.0f} s"
                     if last else "no answer yet")
            log = self.run_dir / "logs" / f"learner-{rank}.log"
            self._judge(_learner_role(rank, len(probes)), probe.silent_s(), f"{doing}; log: {log}")

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

    def version(self) -> int:
        """The learner's current version (0, or the checkpoint's on resume)."""
        return int(self.ray.get(self.learner.leader.version.remote()))

    def update(self) -> dict[str, Any]:
        """One learner update on every rank: {"metrics": ..., "staleness_hist": ...,
        "is_weight_hist": ..., "episodes": ...} (rank 0's, see LearnerHost). A rank that dies
        restarts the group from its last checkpoint; the update is then run again from there.
        While it runs, every role's liveness is watched (module docstring) and the buffer's
        stats checked for failures and stalls."""
        refs = self.learner.submit("update")
        probes = self._learner_probes()
        while True:
            ready, _ = self.ray.wait(refs, timeout=0.5, num_returns=len(refs))
            dead = self._dead_rank(refs, ready)
            if dead is not None:
                self._restart_until_up(*dead)
                for rank in range(len(probes)):  # a new group: what was said of the old one
                    self.liveness.forget(_learner_role(rank, len(probes)))
                self._learner_seen = {}
                refs = self.learner.submit("update")
                probes = self._learner_probes()
                continue
            if len(ready) == len(refs):
                return self._updated(self.ray.get(refs[0]))
            self._watch_nodes()
            self.buffers.check(self.last_version)
            self._follow_buffer()
            self.check_actors()
            self._watch_learner(probes)
            stats = self.poll_buffer()
            if stats is not None:  # with every episode failing no update comes
                self.check_failures(stats)

    def write_endpoints(self) -> None:
        """RUN_DIR/endpoints.json: the run's sockets now, for operators (rewritten when the
        buffer moves or the learner restarts)."""
        (self.run_dir / "endpoints.json").write_text(json.dumps(self.endpoints))

    def _watch_nodes(self) -> None:
        """One line per node lost, naming what ran there (each role's supervision restarts
        its own processes)."""
        for ip, roles in self.nodes.lost():
            self.events.node_lost(ip, roles)

    def _follow_buffer(self) -> None:
        """After the buffer restarted on another node: the learner's client and the actors'
        loops go to its new endpoints."""
        if not self.buffers.moved:
            return
        self.endpoints.update(self.buffers.endpoints)
        self.write_endpoints()
        self.nodes.place("buffer", self.buffers.where)
        for rank in self.learner.ranks:
            self.ray.get(rank.set_buffer.remote(self.endpoints["control"]), timeout=30)
        discarded = self._restart_actor_loops()
        self.events.actor_loops_restarted("the buffer moved", discarded)
        self.buffers.moved = False

    def _updated(self, result: dict[str, Any]) -> dict[str, Any]:
        """After an update: its version; on a checkpoint, a buffer snapshot too, taken before
        the next update samples, so that the snapshot and the checkpoint agree."""
        metrics = result["metrics"]
        self.last_version = int(metrics["version"])
        if metrics.get("checkpoint_saved"):
            try:
                self.buffers.call("snapshot", timeout=60, learner_version=self.last_version)
            except Exception as e:  # the periodic snapshot still runs
                self.events.console.error(f"buffer snapshot failed: {one_line(e)}",
                                          log=self.run_dir / "logs" / "buffer.log")
        return result

    def check_failures(self, buffer_stats: dict[str, Any]) -> None:
        """Raise `EnvFailing` when every actor's recent episodes all failed, or when episodes
        keep failing and no group has become ready for `launch.stop_after_stall_s`."""
        from agent_r1_async.run.output.metrics import failing_actors

        self.events.watch(buffer_stats)  # env errors, blocking warnings, a stall's cause
        why = failing_actors(buffer_stats.get("actors", {}),
                             self.cfg.launch.stop_after_failed_episodes, self.cfg.actors.num_actors)
        if why:
            raise EnvFailing(why)
        limit = self.cfg.launch.stop_after_stall_s
        failing = self.events.stall.failing
        if limit and failing is not None and failing[0] >= limit:
            raise EnvFailing(f"{failing[1]} (launch.stop_after_stall_s={limit:g})")

    def _dead_rank(self, refs: list[Any], ready: list[Any]) -> tuple[int, Exception] | None:
        """(rank, error) of a rank whose process died. A rank whose update *raised* (a bug,
        a data timeout) ends the launch with that error, unless another rank died, which is what
        the survivors' collectives then fail on: give the deaths a moment to surface."""
        died = (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError)
        raised = None
        for ref in ready:
            try:
                self.ray.get(ref, timeout=0)
            except died as e:  # SIGKILL, a crash, Ray's memory monitor
                return refs.index(ref), e
            except self.ray.exceptions.RayTaskError as e:
                raised = e
        if raised is None:
            return None
        done, _ = self.ray.wait(refs, timeout=10.0, num_returns=len(refs))
        for ref in done:
            try:
                self.ray.get(ref, timeout=0)
            except died as e:
                return refs.index(ref), e
            except self.ray.exceptions.RayTaskError:
                continue
        raise raised

    def _restart_until_up(self, rank: int, error: Exception) -> None:
        """`restart_learner`, again when the new group dies while starting (the memory
        monitor may kill it before its first reply); each try counts against max_restarts."""
        died = (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError)
        while True:
            try:
                self.restart_learner(rank, error)
                return
            except died as e:
                rank, error = 0, e

    def restart_learner(self, rank: int, error: Exception) -> None:
        """Kill the whole group (the other ranks wait in a collective), start a new one from
        the last checkpoint and point the actors at its weights socket."""
        from agent_r1_async.learner.checkpoint import latest_checkpoint

        self.learner_restarts += 1
        ckpt = latest_checkpoint(str(self.run_dir))
        if self.learner_restarts > self.cfg.learner.max_restarts:
            why = f"learner rank {rank} failed: {one_line(error)}"
            raise RuntimeError(f"{why}; restarted {self.cfg.learner.max_restarts} times") from error
        self.learner.kill()
        # The new learner's first act is a handshake with the buffer: the memory monitor may
        # have taken the buffer too (it kills several workers at once), so restart it first.
        self.buffers.ensure_alive(self.last_version)
        self.learner = LearnerGroup(self.cfg, self.run_dir, self.endpoints["control"],
                                    resume=ckpt is not None, curve=self.curve)
        lost, self.last_version = self.last_version, self.version()
        redo = (f"; updates {self.last_version + 1}..{lost} are redone, not logged again"
                if lost > self.last_version else "")
        self.endpoints["weights"] = self.ray.get(self.learner.leader.weights_endpoint.remote())
        self.write_endpoints()
        self._locate_learner()
        discarded = self._restart_actor_loops()
        self.events.learner_restarting(
            rank, error, self.cfg.learner.world_size,
            f"{ckpt or 'the initial weights (no checkpoint yet)'} (version {self.last_version}"
            f"{redo})", self.learner_restarts, self.cfg.learner.max_restarts, discarded)
        self.learner.call("publish")

    def _buffer_drops(self) -> dict[str, int] | None:
        """The buffer's `drops` now, its length counts included; None without an answer."""
        try:
            stats = self.buffers.call("stats", timeout=_RECLAIM_TIMEOUT_S,
                                      learner_version=self.last_version)
            return {str(k): int(v) for k, v in stats["drops"].items()}
        except Exception:  # what was discarded is then not said; nothing else depends on it
            return None

    def _restart_actor_loops(self) -> Loss | None:
        """Stop every actor's loop, give back what each held in the buffer and re-run the loops
        against the current endpoints. Returns what the buffer discarded meanwhile (the
        stopped loops' aborted episodes and the reclaimed ones, by the buffer's length counts
        before and after), or the sum of the reclaims' when the buffer gave no counts; None
        when neither is known."""
        before = self._buffer_drops()
        reclaimed: Loss | None = Loss()
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.get(a.stop.remote(), timeout=10)
        self.ray.wait(list(self.runs), timeout=60, num_returns=len(self.runs))
        self.replacing.clear()  # a killed one is waited for below like any other
        self.discarded.clear()
        for i, a in enumerate(self.actors):  # one that Ray is restarting answers once back
            got = self.reclaim(f"actor-{i}")  # the old loop's leftovers; judged once it reports
            reclaimed = None if got is None or reclaimed is None else (
                reclaimed + Loss.from_counts(got))
            self.liveness.forget(f"actor-{i}")
            self._wait_restarted(i, f"actor-{i} (restarting its loop against new endpoints)")
            self.ray.get(a.set_endpoints.remote(self.endpoints))
            self.nodes.place(f"actor-{i}", self.ray.get(a.where.remote()))
        self.runs = {a.run.remote(): i for i, a in enumerate(self.actors)}
        after = self._buffer_drops() if before is not None else None
        if before is None or after is None:
            return reclaimed
        return Loss.between(before, after)

    def buffer_stats(self) -> dict[str, Any]:
        """The buffer's stats, fresh. While the buffer does not answer the launcher keeps
        watching it (named after `launch.unresponsive_s`) instead of waiting in silence."""
        self._buffer_probe.due_now()
        while True:
            stats = self.poll_buffer(timeout_s=0.5)
            if stats is not None:
                return stats

    def shutdown(self, checkpoint: bool) -> str | None:
        """Actors first (their aborted-episode records reach the buffer), then a buffer
        snapshot, then the learner's checkpoint, then the buffer's stop (its final snapshot).
        Every step is bounded: the checkpoint by `launch.stop_timeout_s`, the others by fixed
        bounds. `unsaved` names, at any moment, what is not yet saved (the launch says it when
        a second Ctrl-C forces the exit)."""
        ray = self.ray
        path = None
        self.unsaved = ["the buffer snapshot", *(["the learner checkpoint"] if checkpoint else [])]
        for a in self.actors:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to stop
                ray.get(a.stop.remote(), timeout=10)
        ray.wait(list(self.runs), timeout=30, num_returns=len(self.runs))
        try:  # first, so that a checkpoint that fills the disk cannot cost the buffer's state
            ray.get(self.buffer.snapshot.remote(), timeout=60)
            self.unsaved.remove("the buffer snapshot")
        except Exception as e:
            self.events.console.error(f"buffer snapshot failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
        if checkpoint:
            try:
                # An update still waiting for data would hold the learner's one worker thread
                # (run/processes/hosts.py) until learner.sample_timeout_s: end its wait first.
                self.learner.call("stop_waiting", timeout_s=min(30.0, self.cfg.launch.stop_timeout_s))
                path = self.learner.call("save_checkpoint",
                                         timeout_s=self.cfg.launch.stop_timeout_s)
                self.unsaved.remove("the learner checkpoint")
            except Exception as e:  # a dead rank: the last periodic checkpoint stands
                self.checkpoint_error = disk_full_message(e) or one_line(e)
                self.events.console.error(f"final learner checkpoint failed: {self.checkpoint_error}",
                                          log=self.run_dir / "logs" / "learner-0.log")
                self.learner.kill()
        try:
            ray.get(self.buffer.stop.remote(), timeout=30)
        except Exception as e:
            self.events.console.error(f"buffer stop failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
        return path

"""Place the three roles and keep them running together (Ray itself: ray_cluster.py).

    Supervisor(cfg, run_dir, resume, curve)
      ├─ SupervisedBuffer  the BufferHost ray actor: PULL records, ROUTER credits/samples,
      │                    snapshots; restarted from its snapshot (buffer_group.py, up to
      │                    buffer.max_restarts)
      ├─ LearnerGroup      learner.world_size LearnerHost ray actors in one placement group
      │                    (learner_group.py, one bundle per rank): rank 0 samples and
      │                    PUBlishes weights; all train
      └─ ActorGroup        ActorHost×N ray actors, restarted by Ray up to actors.max_restarts,
                           replaced when unresponsive (actor_group.py)

Each role's own file supervises its processes; this one starts them in dependency order and
does what spans roles: one learner update at a time, with every role watched meanwhile
(liveness.py); a learner group rebuilt from the last checkpoint when a rank dies (the others
are stuck in a collective; up to `learner.max_restarts` times), after restarting a buffer that
died with it, and the actors' loops restarted against the new weights socket; the learner
and the actors pointed at a buffer that moved to another node; a node lost said once (nodes.py);
the run stopped when every episode fails (`EnvFailing`); and the bounded stop.

Only small control values cross Ray (endpoints, metric dicts); data moves over ZeroMQ.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig
from agent_r1_async.disk import disk_full_message
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.output.lines import one_line
from agent_r1_async.run.output.logs import log_file
from agent_r1_async.run.processes.actor_group import ActorGroup
from agent_r1_async.run.processes.buffer_group import SupervisedBuffer
from agent_r1_async.run.processes.forensics import process_death
from agent_r1_async.run.processes.learner_group import LearnerGroup, RankWatch, learner_role
from agent_r1_async.run.processes.liveness import PROBE_EVERY_S, Liveness, Probe, judge
from agent_r1_async.run.processes.nodes import NodeWatch, placement_line
from agent_r1_async.wire.curve import RunKeys, keys_for


class EnvFailing(RuntimeError):
    """Every recent episode failed: the run stops instead of waiting for batches."""


def failing_actors(actors: dict[str, Any], last_n: int, num_actors: int) -> str | None:
    """Why the run should stop, when every one of the `num_actors` actors reported that its
    last ceil(last_n / num_actors) episodes all failed (so the run's last `last_n` did); the
    message quotes each actor's latest failure. None otherwise (or when `last_n` is 0)."""
    per_actor = -(-last_n // max(1, num_actors))
    if last_n <= 0 or len(actors) < num_actors:
        return None
    if any(int(s.get("failed_streak", 0)) < per_actor for s in actors.values()):
        return None
    reasons = sorted({str(s.get("last_error", "")) for s in actors.values()})
    return (f"the last {per_actor * num_actors} episodes all failed "
            f"(launch.stop_after_failed_episodes={last_n}): " + "; ".join(reasons))


class Supervisor:
    """Starts the processes and keeps all three roles alive (buffer, learner group, actors)."""

    _update_started: float | None = None
    """When the update in progress was submitted (monotonic); None between updates."""
    _longest_update_s = 0.0
    """The longest compute of a finished update (its time less its wait for data)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool, curve: RunKeys | None,
                 events: Events | None = None) -> None:
        import ray

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
        self.liveness = Liveness(cfg.launch.unresponsive_s)
        self.actors = ActorGroup(cfg, run_dir, self.endpoints, curve, self.buffers, self.events,
                                 self.liveness, place=lambda role, w: self.nodes.place(role, w))
        self._buffer_probe = Probe(ray, lambda: self.buffer.stats.remote(), PROBE_EVERY_S)
        self._last_stats: dict[str, Any] = {}
        self.ranks = RankWatch(ray, self.liveness, self.events, run_dir / "logs")
        self.learner.wait_started()
        self.last_version = self.version()
        """The learner's version after its last update (a restarted buffer is told it)."""
        self.nodes = NodeWatch(ray.nodes)
        """Each process's node (`placement_line`, node-loss events)."""
        self.nodes.place("buffer", self.buffers.where)
        self._locate_learner()
        for i, w in enumerate(self.actors.where()):
            self.nodes.place(f"actor-{i}", w)
        if len(self.nodes.alive) > 1:
            self.events.console.say(f"placement: {placement_line(self.nodes.where)}")
        if resume:
            self.learner.call("publish")

    def _locate_learner(self) -> None:
        ranks = self.ray.get([r.where.remote() for r in self.learner.ranks])
        for rank, w in enumerate(ranks):
            self.nodes.place(learner_role(rank, len(ranks)), w)

    @property
    def buffer(self) -> Any:
        """The buffer's current Ray actor handle (a new one after a restart)."""
        return self.buffers.handle

    def poll_buffer(self, timeout_s: float = 0.0) -> dict[str, Any] | None:
        """The buffer's stats when an answer came within `timeout_s` (None otherwise; a new
        request goes out every `PROBE_EVERY_S`); each look judges the buffer, each answer the
        actors. A dead buffer is restarted (`SupervisedBuffer.call`) and asked again."""
        died = (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError)
        try:
            answered, stats = self._buffer_probe.poll(timeout_s)
        except died:
            answered, stats = True, self.buffers.call("stats", learner_version=self.last_version)
        last = self._last_stats
        judge(self.liveness, self.events, "buffer", self._buffer_probe.silent_s(),
              f"no answer to the launcher since it was at version "
              f"{last.get('learner_version', '?')} (groups: {last.get('groups_ready', '?')} "
              f"ready, {last.get('in_flight_groups', '?')} in flight); log: "
              f"{self.run_dir / 'logs' / 'buffer.log'}")
        if not answered:
            return None
        self._last_stats = stats
        self.buffers.seen(stats)
        self.actors.watch(stats, self.last_version)
        return stats

    def version(self) -> int:
        """The learner's current version (0, or the checkpoint's on resume)."""
        return int(self.ray.get(self.learner.leader.version.remote()))

    def update(self, stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
        """One learner update on every rank: {"metrics": ..., "staleness_hist": ...,
        "is_weight_hist": ..., "episodes": ...} (rank 0's, see LearnerHost). A rank that dies
        restarts the group from its last checkpoint; the update is then run again from there.
        While it runs, every role's liveness is watched (liveness.py) and the buffer's stats
        checked for failures and stalls. None when `stop()` turns true first (the launch's
        wall-clock budget): the update is left running, for `shutdown` as after a Ctrl-C."""
        refs = self._submit_update()
        while True:
            if stop is not None and stop():
                return None
            ready, _ = self.ray.wait(refs, timeout=0.5, num_returns=len(refs))
            dead = self.learner.dead_rank(refs, ready)
            if dead is not None:
                self._restart_until_up(*dead)
                self.ranks.forget()
                refs = self._submit_update()
                continue
            if len(ready) == len(refs):
                return self._updated(self.ray.get(refs[0]))
            self._watch_nodes()
            self.buffers.check(self.last_version)
            self._follow_buffer()
            self.actors.check(self.last_version)
            self.ranks.look()
            stats = self.poll_buffer()
            if stats is not None:  # with every episode failing no update comes
                self.check_failures(stats)

    def _submit_update(self) -> list[Any]:
        """Start an update on every rank, its clock (`update_left_s`) and the ranks' watch."""
        refs = self.learner.submit("update")
        self._update_started = time.monotonic()
        self.ranks.start(self.learner.ranks)
        return refs

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
        discarded = self.actors.restart_loops(self.last_version)
        self.events.actor_loops_restarted("the buffer moved", discarded)
        self.buffers.moved = False

    def _updated(self, result: dict[str, Any]) -> dict[str, Any]:
        """After an update: its version; on a checkpoint, a buffer snapshot too, taken before
        the next update samples, so that the snapshot and the checkpoint agree."""
        metrics = result["metrics"]
        self.last_version = int(metrics["version"])
        self._update_started = None
        self._longest_update_s = max(self._longest_update_s, float(
            metrics.get("update_time_s", 0.0)) - float(metrics.get("data_wait_s", 0.0)))
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
        self.events.watch(buffer_stats)  # env errors, blocking warnings, a stall's cause
        why = failing_actors(buffer_stats.get("actors", {}),
                             self.cfg.launch.stop_after_failed_episodes, self.cfg.actors.num_actors)
        if why:
            raise EnvFailing(why)
        limit = self.cfg.launch.stop_after_stall_s
        failing = self.events.stall.failing
        if limit and failing is not None and failing[0] >= limit:
            raise EnvFailing(f"{failing[1]} (launch.stop_after_stall_s={limit:g})")

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
        discarded = self.actors.restart_loops(self.last_version)
        cause = process_death(error, log_file(self.run_dir / "logs", "learner", rank))
        self.events.learner_restarting(
            rank, cause, self.cfg.learner.world_size,
            f"{ckpt or 'the initial weights (no checkpoint yet)'} (version {self.last_version}"
            f"{redo})", self.learner_restarts, self.cfg.learner.max_restarts, discarded)
        self.learner.call("publish")

    def buffer_stats(self) -> dict[str, Any]:
        """The buffer's stats, fresh. While the buffer does not answer the launcher keeps
        watching it (named after `launch.unresponsive_s`) instead of waiting in silence."""
        self._buffer_probe.due_now()
        while True:
            stats = self.poll_buffer(timeout_s=0.5)
            if stats is not None:
                return stats

    def update_left_s(self) -> float:
        """What the update in progress may still need (`_update_need`)."""
        return self._update_need()[0]

    def _update_need(self) -> tuple[float, str]:
        """(What the update in progress may still need in seconds, what that is judged by):
        the longer of 1.5 × the longest update's compute so far (its time less its wait for
        data, which the stop ends) and, from rank 0's `progress`, 1.5 × its whole compute as
        the share of its work done so far extrapolates it (a long-horizon run's first update
        can outlast the wall-clock budget), each less its compute so far. Its compute so far
        is rank 0's, not the time since the update was asked for, which counts its wait for
        data; a rank that does not answer leaves that time. 0 with none in progress, none
        computing (it waits for data, which the stop ends) or nothing to go by."""
        if self._update_started is None:
            return 0.0, ""
        try:
            seen = self.ray.get(self.learner.leader.progress.remote(), timeout=10)
        except Exception:  # a rank that does not answer: only the longest update to go by
            seen = None
        if seen is not None and "computing_s" not in seen:
            return 0.0, ""
        spent = (float(seen["computing_s"]) if seen is not None
                 else time.monotonic() - self._update_started)
        options = []
        if self._longest_update_s > 0:
            options.append((1.5 * self._longest_update_s - spent,
                            f"the longest so far computed for {self._longest_update_s:.0f} s"))
        done, total = (float(seen.get("work_done", 0)), float(seen.get("work_total", 0))) \
            if seen is not None else (0.0, 0.0)
        if done > 0 and total > 0:
            which = "this one" if self._longest_update_s > 0 else "the first"
            options.append((1.5 * spent * total / done - spent,
                            f"{which}, {done / total:.0%} of its work done in {spent:.0f} s"))
        if not options:
            return 0.0, ""
        left, judged_by = max(options)
        return max(0.0, left), judged_by

    def shutdown(self, checkpoint: bool) -> str | None:
        """Actors first (their aborted-episode records reach the buffer), then a buffer
        snapshot, then the learner's checkpoint, then the buffer's stop (its final snapshot).
        Every step is bounded: the checkpoint by `launch.stop_timeout_s` beyond what the
        update in progress, which the checkpoint waits behind, may still need
        (`update_left_s`), the others by fixed bounds. `unsaved` names, at any moment, what is
        not yet saved (the launch says it when a second Ctrl-C forces the exit)."""
        ray = self.ray
        path = None
        self.unsaved = ["the buffer snapshot", *(["the learner checkpoint"] if checkpoint else [])]
        self.actors.stop(wait_s=30)
        try:  # first, so that a checkpoint that fills the disk cannot cost the buffer's state
            ray.get(self.buffer.snapshot.remote(), timeout=60)
            self.unsaved.remove("the buffer snapshot")
        except Exception as e:
            self.events.console.error(f"buffer snapshot failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
        if checkpoint:
            try:
                # An update still waiting for data would hold the learner's one worker thread
                # (learner_group.py LearnerHost) until learner.sample_timeout_s: end its wait
                # first.
                self.learner.call("stop_waiting", timeout_s=min(30.0, self.cfg.launch.stop_timeout_s))
                left, judged_by = self._update_need()
                bound = self.cfg.launch.stop_timeout_s + left
                if left:
                    self.events.console.say(
                        f"stopping: the update in progress ({judged_by}) ends before the "
                        f"checkpoint; waiting up to {bound:.0f} s")
                path = self.learner.call("save_checkpoint", timeout_s=bound)
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

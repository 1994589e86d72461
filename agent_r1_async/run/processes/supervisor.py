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

Only small control values cross Ray (endpoints, metric dicts); data moves over ZeroMQ.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig
from agent_r1_async.learner.checkpoint_files import disk_full_message
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events, one_line
from agent_r1_async.run.processes.buffer_group import SupervisedBuffer
from agent_r1_async.run.processes.learner_group import LearnerGroup
from agent_r1_async.wire.curve import RunKeys, keys_for


def actor_ids(cfg: RunConfig) -> list[str]:
    """The actors' ids, which are also their CurveZMQ identities (wire/roles.py)."""
    return [f"actor-{i}" for i in range(cfg.actors.num_actors)]


class EnvFailing(RuntimeError):
    """Every recent episode failed: the run stops instead of waiting for batches."""


_FAILURE_CHECK_S = 2.0


class Supervisor:
    """Starts the processes and keeps all three roles alive (buffer, learner group, actors)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool, curve: RunKeys | None,
                 events: Events | None = None) -> None:
        import ray

        from agent_r1_async.run.processes.hosts import ActorHost

        self.cfg = cfg
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
            max_restarts=cfg.actors.max_restarts,
            max_concurrency=2,
        )(ActorHost)
        self.actors = [  # each actor with its own client key and no server secret
            actor_cls.remote(cfg, a, self.endpoints, keys_for(curve, a), str(run_dir / "logs"))
            for a in actor_ids(cfg)
        ]
        self.runs = {a.run.remote(): i for i, a in enumerate(self.actors)}
        self.restarts = [0] * len(self.actors)
        self.learner.wait_started()
        self.last_version = self.version()
        """The learner's version after its last update (a restarted buffer is told it)."""
        if resume:
            self.learner.call("publish")

    @property
    def buffer(self) -> Any:
        """The buffer's current Ray actor handle (a new one after a restart)."""
        return self.buffers.handle

    def check_actors(self) -> None:
        """Re-run the loop of an actor whose process died (Ray restarted it)."""
        done, _ = self.ray.wait(list(self.runs), timeout=0, num_returns=len(self.runs))
        for ref in done:
            i = self.runs.pop(ref)
            try:
                self.ray.get(ref)
                continue  # finished normally (stopped)
            except Exception as e:  # the process died, or the actor's loop raised: a crash
                reason = f"actor-{i} died: {self.events.actor_died(f'actor-{i}', e, self.restarts[i] + 1)}"
            self.restarts[i] += 1
            if self.restarts[i] > self.cfg.actors.max_restarts:
                raise RuntimeError(f"{reason}; restarted {self.cfg.actors.max_restarts} times")
            self._wait_restarted(i, reason)
            # Ray re-ran its constructor with the endpoints of launch time; a learner restarted
            # since then publishes weights elsewhere.
            self.ray.get(self.actors[i].set_endpoints.remote(self.endpoints))
            self.events.actor_restarted(f"actor-{i}", self.restarts[i], self.cfg.actors.max_restarts)
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

    def version(self) -> int:
        """The learner's current version (0, or the checkpoint's on resume)."""
        return int(self.ray.get(self.learner.leader.version.remote()))

    def update(self) -> dict[str, Any]:
        """One learner update on every rank: {"metrics": ..., "staleness_hist": ...} (rank 0's,
        see LearnerHost). A rank that dies restarts the group from its last checkpoint; the
        update is then run again from there."""
        refs = self.learner.submit("update")
        next_check = time.monotonic() + _FAILURE_CHECK_S
        while True:
            ready, _ = self.ray.wait(refs, timeout=0.5, num_returns=len(refs))
            dead = self._dead_rank(refs, ready)
            if dead is not None:
                self._restart_until_up(*dead)
                refs = self.learner.submit("update")
                continue
            if len(ready) == len(refs):
                return self._updated(self.ray.get(refs[0]))
            self.buffers.check(self.last_version)
            self.check_actors()
            if time.monotonic() >= next_check:  # with every episode failing no update comes
                self.check_failures(self.buffer_stats())
                next_check = time.monotonic() + _FAILURE_CHECK_S

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
        """Raise `EnvFailing` when every actor's recent episodes all failed."""
        from agent_r1_async.run.output.metrics import failing_actors

        self.events.watch(buffer_stats)  # env errors, blocking warnings, a stall's cause
        why = failing_actors(buffer_stats.get("actors", {}),
                             self.cfg.launch.stop_after_failed_episodes, self.cfg.actors.num_actors)
        if why:
            raise EnvFailing(why)

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
        self.events.learner_restarting(
            rank, error, self.cfg.learner.world_size,
            f"{ckpt or 'the initial weights (no checkpoint yet)'} (version {self.last_version}"
            f"{redo})", self.learner_restarts, self.cfg.learner.max_restarts)
        self.endpoints["weights"] = self.ray.get(self.learner.leader.weights_endpoint.remote())
        self._restart_actor_loops()
        self.learner.call("publish")

    def _restart_actor_loops(self) -> None:
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.get(a.stop.remote(), timeout=10)
        self.ray.wait(list(self.runs), timeout=60, num_returns=len(self.runs))
        for i, a in enumerate(self.actors):  # one that Ray is restarting answers once back
            self._wait_restarted(i, f"actor-{i} (restarting its loop for the new learner)")
            self.ray.get(a.set_endpoints.remote(self.endpoints))
        self.runs = {a.run.remote(): i for i, a in enumerate(self.actors)}

    def buffer_stats(self) -> dict[str, Any]:
        return self.buffers.call("stats", learner_version=self.last_version)

    def shutdown(self, checkpoint: bool) -> str | None:
        """Actors first (their aborted-episode records reach the buffer), then a buffer
        snapshot, then the learner's checkpoint, then the buffer's stop (its final snapshot)."""
        ray = self.ray
        path = None
        for a in self.actors:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to stop
                ray.get(a.stop.remote(), timeout=10)
        ray.wait(list(self.runs), timeout=30, num_returns=len(self.runs))
        try:  # first, so that a checkpoint that fills the disk cannot cost the buffer's state
            ray.get(self.buffer.snapshot.remote(), timeout=60)
        except Exception as e:
            self.events.console.error(f"buffer snapshot failed: {one_line(e)}",
                                      log=self.run_dir / "logs" / "buffer.log")
        if checkpoint:
            try:
                # An update still waiting for data would hold the learner's one worker thread
                # (run/processes/hosts.py) until learner.sample_timeout_s: end its wait first.
                self.learner.call("stop_waiting")
                path = self.learner.call("save_checkpoint")
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

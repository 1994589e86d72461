"""The buffer process under supervision: a dead one is restarted from its snapshot.

`SupervisedBuffer` owns the `BufferHost` Ray actor. It keeps one call pending on it, `serve()`,
which returns only when the service loop ends; when the process dies (SIGKILL, the OOM
killer, a loop broken for good: the host exits with status 70) that call fails, and `check()`
starts a new `BufferHost`:

- on the same node and the *same* endpoints (the ports the first one bound), so every client
  keeps its address: the actors' PUSH sockets and DEALERs and the learner's DEALER reconnect
  by themselves (ZeroMQ), records pushed meanwhile wait in their queues, and a control request
  lost with the old process is sent again by `BufferClient`'s retries;
- or, when its node is lost (Ray marks it dead), on another node that has `buffer.resources`,
  with new endpoints: `moved` says so, and the supervisor points the learner and the actors
  there;
- from the latest snapshot in `RUN_DIR/buffer` (written every `buffer.snapshot_interval_s`, on
  every learner checkpoint, and first thing at shutdown), with the actors' credits kept (the
  same actors go on), told the learner's current version;
- at most `buffer.max_restarts` times per run, each one console line, which also says how
  many records the old process had received after its snapshot and the episodes they belong
  to, with their steps and generated tokens (lost with it: none of them can be whole again;
  counted from the launcher's last look at its stats, `seen`, so at least that many).

The host writes its pid to `RUN_DIR/buffer.pid` (the kill drill and an operator find it there).

What records are checked against (`RecordBounds`, buffers/validate.py) is derived here once, from
the run's config and the policy's config.json `vocab_size`, and handed to every `BufferHost`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.lengths import UNSAVED, WIRE_PREFIX, Loss
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import RunConfig
from agent_r1_async.run.output.events import death_cause, process_death
from agent_r1_async.run.output.logs import log_file
from agent_r1_async.run.processes.nodes import alive_nodes
from agent_r1_async.run.processes.ray_cluster import BUFFER_NUM_CPUS
from agent_r1_async.wire.zmq import CurveKeys


def record_bounds(cfg: RunConfig) -> RecordBounds:
    """The run's record bounds: `RecordBounds.from_config` with the policy's config.json
    `vocab_size` (0 for a hub id not on disk: token ids then go unchecked)."""
    from agent_r1_async.models import model_vocab_size

    return RecordBounds.from_config(cfg, model_vocab_size(cfg.model.name_or_path))


class SupervisedBuffer:
    def __init__(self, cfg: RunConfig, run_dir: Path, curve: CurveKeys | None,
                 resume: bool) -> None:
        import ray

        self.ray, self.cfg, self.run_dir, self.curve = ray, cfg, run_dir, curve
        self.bounds = record_bounds(cfg)  # once: every restarted host checks the same bounds
        self.restarts = 0
        self._bound: dict[str, str] | None = None
        self._node: str | None = None
        self.where: dict[str, str] = {}
        """The buffer's node (hosts.where)."""
        self.moved = False
        """True after a restart on another node (new endpoints) until the supervisor has
        pointed the clients there."""
        self._records_seen: int | None = None
        self._unsaved_seen: Loss | None = None
        self._start(relaunch=resume)
        if resume:  # what a corrupt snapshot in RUN_DIR/buffer cost, if it did
            self._say_snapshot(self.ray.get(self.handle.restored.remote()))

    def _start(self, relaunch: bool) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from agent_r1_async.run.processes.hosts import BufferHost

        options: dict[str, Any] = {"resources": dict(self.cfg.buffer.resources)}
        if self._node is not None:  # its endpoints are on this node's addresses
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self._node, soft=False)
        cls = self.ray.remote(num_cpus=BUFFER_NUM_CPUS, max_concurrency=4)(BufferHost)
        self.handle = cls.options(**options).remote(
            self.cfg, self.bounds, str(self.run_dir / "buffer"), self.curve, relaunch,
            bind=self._bound, pid_file=str(self.run_dir / "buffer.pid"),
            log_dir=str(self.run_dir / "logs"))
        self.endpoints: dict[str, str] = self.ray.get(self.handle.endpoints.remote())
        self._bound, self.where = self.ray.get(self.handle.placement.remote())
        self._node = self.where["node_id"]
        self._watch = self.handle.serve.remote()

    def dead(self) -> BaseException | None:
        """Why the buffer's process or service loop ended, or None while it serves."""
        ready, _ = self.ray.wait([self._watch], timeout=0)
        if not ready:
            return None
        try:
            failure = self.ray.get(ready[0])
        except Exception as e:  # the process died (ActorDiedError, OutOfMemoryError, ...)
            return e
        return RuntimeError(f"its service loop stopped: {failure or 'no reason given'}")

    def check(self, learner_version: int | None) -> bool:
        """Restart the buffer if it died; True if it did."""
        error = self.dead()
        if error is None:
            return False
        self.restart(error, learner_version)
        return True

    def ensure_alive(self, learner_version: int | None, timeout_s: float = 30.0) -> None:
        """Ask the buffer's process for its pid; restart it if it is dead."""
        try:
            self.ray.get(self.handle.pid.remote(), timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            return  # busy, not dead: its watch call reports a death
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError) as e:
            self.restart(self.dead() or e, learner_version)

    def _node_lost(self) -> bool:
        """Ray marks the buffer's node dead: its endpoints went with it, so the next start
        binds anew on whichever node `buffer.resources` finds."""
        if self._node is None or self._node in alive_nodes(self.ray.nodes()):
            return False
        self._node = self._bound = None
        return True

    def seen(self, stats: dict[str, Any]) -> None:
        """The launcher's latest look at the buffer's stats (what a restart reports lost)."""
        self._records_seen = int(stats.get("records", 0))
        prefix = WIRE_PREFIX + UNSAVED
        unsaved = {k[len(prefix):]: int(v) for k, v in stats.get("drops", {}).items()
                   if k.startswith(prefix)}
        self._unsaved_seen = Loss.from_counts(unsaved) if unsaved else None

    def restart(self, error: BaseException, learner_version: int | None) -> None:
        self.restarts += 1
        log = log_file(self.run_dir / "logs", "buffer")
        node_lost = self._node_lost()
        why = (f"buffer lost with its node {self.where.get('ip', '?')}" if node_lost
               else f"buffer process died: {process_death(error, log)}; log: {log}")
        if self.restarts > self.cfg.buffer.max_restarts:
            raise RuntimeError(f"{why}; restarted {self.cfg.buffer.max_restarts} times "
                               "(buffer.max_restarts)") from error
        with contextlib.suppress(Exception):
            self.ray.kill(self.handle, no_restart=True)
        try:
            self._start(relaunch=False)  # the same actors go on: their credits stand
        except Exception as e:
            if node_lost or not self._node_lost():  # e.g. its port was taken meanwhile
                cause = death_cause(e) if isinstance(e, self.ray.exceptions.RayError) else repr(e)
                raise RuntimeError(f"{why}; restarting it on {self._bound} failed: {cause}") from e
            # Ray marked its node dead only now (its health checks lag a process's death)
            node_lost, why = True, f"buffer lost with its node {self.where.get('ip', '?')}"
            self._start(relaunch=False)
        restored = self.ray.get(self.handle.restored.remote())
        if learner_version is not None:
            self.ray.get(self.handle.set_version.remote(learner_version))
        self.moved = node_lost
        where = (f"on node {self.where['ip']} with new endpoints" if node_lost
                 else "on the same endpoints")
        print(f"[launch] {why}; restarted from its snapshot of version {restored['version']} "
              f"({restored['groups']} groups ready) {where}, buffer now at version "
              f"{learner_version if learner_version is not None else restored['version']}; "
              f"{self._lost(int(restored.get('records', 0)))} "
              f"({self.restarts}/{self.cfg.buffer.max_restarts})", file=sys.stderr, flush=True)
        self._records_seen = self._unsaved_seen = None
        self._say_snapshot(restored)

    def _lost(self, restored_records: int) -> str:
        """What the old process had received after its snapshot, as far as the launcher saw."""
        if self._records_seen is None:
            return "records received after the snapshot: unknown (no stats seen)"
        lost = max(0, self._records_seen - restored_records)
        episodes = ("" if self._unsaved_seen is None else
                    f"; discarded in flight: {self._unsaved_seen.phrase()} with a record since")
        return (f"lost with it: {lost} records received after the snapshot{episodes} (at "
                "least: counted at the launcher's last look)")

    @staticmethod
    def _say_snapshot(restored: dict[str, Any]) -> None:
        """The console's line about a corrupt (skipped) or unverified snapshot, if any."""
        if restored.get("note"):
            print(f"[launch] {restored['note']}", file=sys.stderr, flush=True)

    def call(self, method: str, *args: Any, timeout: float | None = None,
             learner_version: int | None = None) -> Any:
        """`method` on the buffer; a buffer that died is restarted and asked again once."""
        try:
            return self.ray.get(getattr(self.handle, method).remote(*args), timeout=timeout)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.OutOfMemoryError) as e:
            error = self.dead() or e
        self.restart(error, learner_version)
        return self.ray.get(getattr(self.handle, method).remote(*args), timeout=timeout)

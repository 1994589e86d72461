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

The host (`BufferHost`, a Ray actor) builds the `BufferService` with its own ZeroMQ transport,
binds its two sockets and writes its pid to `RUN_DIR/buffer.pid` (the kill drill and an
operator find it there); its loop broken for good ends the process (status 70), so that
supervision sees a dead buffer instead of a live process serving nothing. Only small values
cross Ray (endpoints, stats as named fields: `struct_to_dict`); records move over ZeroMQ.

What records are checked against (`RecordBounds`, buffers/validate.py) is derived here once, from
the run's config and the policy's config.json `vocab_size`, and handed to every `BufferHost`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.buffers.lengths import UNSAVED, WIRE_PREFIX, Loss
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import RunConfig
from agent_r1_async.run.output.logs import log_file, own_log
from agent_r1_async.run.processes.forensics import death_cause, process_death
from agent_r1_async.run.processes.nodes import Host, advertised, alive_nodes, on_this_node, where
from agent_r1_async.run.processes.ray_cluster import BUFFER_NUM_CPUS
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport


def record_bounds(cfg: RunConfig) -> RecordBounds:
    """The run's record bounds: `RecordBounds.from_config` with the policy's config.json
    `vocab_size` (0 for a hub id not on disk: token ids then go unchecked)."""
    from agent_r1_async.models import model_vocab_size

    return RecordBounds.from_config(cfg, model_vocab_size(cfg.model.name_or_path))


def struct_to_dict(obj: Any) -> Any:
    """Wire structs are array_like (positional); give the launcher named fields instead."""
    if isinstance(obj, msgspec.Struct):
        return {f: struct_to_dict(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, dict):
        return {k: struct_to_dict(v) for k, v in obj.items()}
    return obj


def _exit_broken_buffer(exc: BaseException) -> None:
    """The buffer's loop is broken for good (its final snapshot is written): end this process
    so that supervision sees a dead buffer, instead of a live process serving nothing."""
    print(f"buffer: service loop broken ({type(exc).__name__}: {exc}); exiting", file=sys.stderr,
          flush=True)
    os._exit(70)


class BufferHost(Host):
    """The buffer's process. `bounds`: the run's record bounds, built once by the launch
    (`SupervisedBuffer`) and the same for every restart. `bind`: the endpoints to bind (a
    restarted buffer takes its predecessor's); default: free ports on `launch.bind_host`.
    `pid_file`: where this process writes its pid."""

    def __init__(
        self, cfg: RunConfig, bounds: RecordBounds, snapshot_dir: str | None,
        curve: CurveKeys | None, resume: bool, bind: dict[str, str] | None = None,
        pid_file: str | None = None, log_dir: str | None = None,
    ) -> None:
        own_log(cfg, log_dir, "buffer")
        from agent_r1_async.buffers.service import BufferService

        cfg = on_this_node(cfg)

        self.cfg = cfg
        self.transport = ZmqTransport(curve=curve)
        host = cfg.launch.bind_host
        self.service = BufferService(
            cfg.buffer,
            cfg.algorithm,
            self.transport,
            data_endpoint=bind["data"] if bind else tcp_endpoint(host),
            control_endpoint=bind["control"] if bind else tcp_endpoint(host),
            snapshot_dir=snapshot_dir,
            fresh_actors=resume,  # a relaunch starts new actors: the old ones' credits are void
            on_fatal=_exit_broken_buffer,
            bounds=bounds,
        )
        self.service.start()
        if pid_file:
            with contextlib.suppress(OSError):
                Path(pid_file).write_text(str(os.getpid()))

    def placement(self) -> tuple[dict[str, str], dict[str, str]]:
        """The endpoints as bound, and this node (`where`): where a restart binds again while
        the node lives."""
        bound = {"data": self.service.data_endpoint, "control": self.service.control_endpoint}
        return bound, where()

    def serve(self) -> str:
        """Returns when the service loop ends (its failure, or "" after `stop`): the launcher
        keeps this call pending to see the buffer die."""
        self.service.join()
        return repr(self.service.failure) if self.service.failure is not None else ""

    def restored(self) -> dict[str, Any]:
        """What this process restored from the snapshot: its version, ready groups and records
        received (`BufferStats.records`), and `note`: the console's line when a snapshot was
        corrupt or unverified ("" if none)."""
        stats = self.service.metrics()
        report = self.service.snapshot_report
        return {"version": stats.learner_version, "groups": stats.groups_ready,
                "records": stats.records,
                "note": (report.line() if report is not None else None) or ""}

    def set_version(self, version: int) -> None:
        self.service.set_version(version)

    def reclaim(self, actor_id: str) -> dict[str, int]:
        """The launcher replaces `actor_id`'s process: what it held comes back now
        (`BufferService.reclaim`)."""
        return self.service.reclaim(actor_id)

    def snapshot(self) -> str | None:
        return self.service.snapshot_now()

    def endpoints(self) -> dict[str, str]:
        host = self.cfg.launch.bind_host
        return {
            "data": advertised(self.service.data_endpoint, host),
            "control": advertised(self.service.control_endpoint, host),
        }

    def stats(self) -> dict[str, Any]:
        return struct_to_dict(self.service.metrics())

    def stop(self) -> None:
        self.service.stop()


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
        """The buffer's node (nodes.where)."""
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
            # Ray marked its node dead only now (its health checks see a process's death late)
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

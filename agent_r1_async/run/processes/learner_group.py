"""The learner ranks as one supervised unit: `learner.world_size` LearnerHost Ray actors in one
placement group, started, called and killed together (a rank that dies leaves the others in a
collective, so the group is rebuilt as a whole, from the last checkpoint: supervisor.py).

Each `LearnerHost` builds its `Learner` with its own ZeroMQ transport (rank 0 alone talks to
the buffer and publishes weights), pins its torch threads to the CPUs Ray reserved, and runs
the model's work (loading, updates, publishing, checkpoints) on one worker thread of its own;
Ray's second thread answers `progress()`, what that worker runs and for how long, which the
launcher asks every rank while it waits for an update (`RankWatch`, judged by liveness.py).
`dead_rank` tells a rank's death (which restarts the group) from an update that raised (which
ends the launch).

A resumed group says on the console which checkpoint it skipped as corrupt and which it
resumed from (learner/checkpoint.py `resume_intact`), one line; with none intact its start
fails with `NoIntactCheckpoint`, raised here as itself (one line naming the run directory),
not as Ray's task error."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_r1_async.config import RunConfig
from agent_r1_async.run.output.logs import own_log
from agent_r1_async.run.processes.liveness import PROBE_EVERY_S, Liveness, Probe, judge
from agent_r1_async.run.processes.nodes import Host, advertised, node_ip, on_this_node, pin_threads
from agent_r1_async.run.processes.ray_cluster import ENV
from agent_r1_async.wire.curve import RunKeys, keys_for
from agent_r1_async.wire.roles import LEARNER
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport

if TYPE_CHECKING:
    from agent_r1_async.run.output.events import Events
    from agent_r1_async.weights.seam import WeightSender


_LEARNER_CLIENT_RETRIES = 12
_WORK = {"run_once": "an update", "_start": "loading the model", "_connect": "connecting",
         "publish": "publishing weights", "save_checkpoint": "a checkpoint"}
"""What `LearnerHost.progress` calls each of its worker's functions."""


class LearnerHost(Host):
    """One learner rank. `learner.world_size` of them form a group (`LearnerGroup`):
    built cheap, then `start` on all ranks at once joins the process group at rank 0's
    `rendezvous` address (FSDP2 from there on, learner/trainer.py) and builds the Learner.
    Rank 0 alone talks to the buffer and publishes weights; every rank runs every update."""

    def __init__(self, cfg: RunConfig, rank: int, run_dir: str, curve: CurveKeys | None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        own_log(cfg, str(Path(run_dir) / "logs"), "learner", rank)
        cfg = on_this_node(cfg)
        pin_threads(cfg.learner.num_cpus)
        # Ray runs this actor's calls on a pool of max_concurrency threads, and glibc gives
        # each thread its own malloc arena: updates on alternating threads each kept a copy of
        # the activations' peak resident (10.6 vs 6.7 GB, learner/memory_savers.py). The model, the
        # updates, publishing and checkpoints all run on this one thread instead.
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="learner")
        self._doing: tuple[str, float] = ("idle", time.monotonic())
        """What the worker thread runs and since when (`progress`)."""
        self.cfg = cfg
        self.rank = rank
        self.run_dir = run_dir
        self.curve = curve
        self.learner: Any = None
        self.resume_report: Any = None
        """What `start` resumed from and skipped (learner/checkpoint.py `ResumeReport`)."""
        self.client: Any = None
        self.weight_sender: WeightSender | None = None
        # The launch test (and an operator) finds a rank's process here (when this node sees
        # the run directory; checkpoints need it to, see README "Scaling the learner").
        with contextlib.suppress(OSError):
            (Path(run_dir) / f"learner-rank-{rank}.pid").write_text(str(os.getpid()))

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: this node's address and a free port for the process group's TCP store."""
        from agent_r1_async.learner.distributed import free_port

        host = self.cfg.launch.bind_host  # 0.0.0.0: a multi-node cluster
        if host in ("0.0.0.0", "*"):
            return node_ip(), free_port("0.0.0.0")
        return host, free_port(host)

    def _on_worker(self, fn: Any, *args: Any) -> Any:
        return self._worker.submit(self._doing_while, fn, *args).result()

    def _doing_while(self, fn: Any, *args: Any) -> Any:
        name = getattr(fn, "__name__", "work")
        self._doing = (_WORK.get(name, name), time.monotonic())
        try:
            return fn(*args)
        finally:
            self._doing = ("idle", time.monotonic())

    def progress(self) -> dict[str, Any]:
        """What this rank's worker thread runs and for how long: {"doing": ..., "for_s": ...},
        and while an update computes its progress (`Learner.compute_progress`). Answered on
        Ray's second thread, so a rank that answers is alive however long its update or
        checkpoint takes (the launcher's liveness, liveness.py); a stopped process, or one
        holding the GIL for good, does not answer."""
        doing, since = self._doing
        out: dict[str, Any] = {"doing": doing, "for_s": time.monotonic() - since}
        if self.learner is not None:
            out.update(self.learner.compute_progress())
        return out

    def connect(self, control_endpoint: str) -> None:
        """Rank 0: the buffer client and the bound weight sender, before the model loads, so
        the launcher can start the actors (they need the weights endpoint) while `start`
        builds the Learner. Other ranks: nothing."""
        self._on_worker(self._connect, control_endpoint)

    def _connect(self, control_endpoint: str) -> None:
        from agent_r1_async.weights.backends import make_weight_sender
        from agent_r1_async.wire.buffer_client import BufferClient

        if self.rank != 0 or self.weight_sender is not None:
            return
        self.transport = ZmqTransport(curve=self.curve)
        # Enough tries to outlast a buffer restart (run/processes/buffer_group.py) on a loaded
        # machine: the launcher, not this client, gives up on a buffer that stays dead.
        self.client = BufferClient(self.transport, control_endpoint, "learner", "learner",
                                   retries=_LEARNER_CLIENT_RETRIES)
        self.client.connect()
        self.weight_sender = make_weight_sender(self.cfg, self.transport)  # weights.backend

    def start(self, master: tuple[str, int], control_endpoint: str, resume: bool) -> None:
        """Join the group (world_size > 1, or CPU offload, which needs FSDP2) and build the
        Learner, from the latest checkpoint when resuming; a collective over the ranks."""
        self._on_worker(self._start, master, control_endpoint, resume)

    def _start(self, master: tuple[str, int], control_endpoint: str, resume: bool) -> None:
        from agent_r1_async.learner import distributed
        from agent_r1_async.learner.checkpoint import latest_checkpoint, resume_intact
        from agent_r1_async.learner.loop import Learner
        from agent_r1_async.learner.policy_net import resolve_device

        lc = self.cfg.learner
        if lc.world_size > 1 or lc.cpu_offload:
            backend = distributed.resolve_backend(lc.backend, resolve_device(lc.device))
            distributed.init_group(self.rank, lc.world_size, master[0], master[1], backend)
        self._connect(control_endpoint)
        client = self.client if self.rank == 0 else None
        if resume and latest_checkpoint(self.run_dir) is not None:
            # The newest checkpoint that verifies and loads; a corrupt one is skipped.
            self.learner, self.resume_report = resume_intact(
                self.run_dir, lambda ckpt: Learner.from_checkpoint(
                    self.cfg, client, self.weight_sender, self.run_dir, checkpoint_dir=ckpt))
        else:
            self.learner = Learner(self.cfg, client, self.weight_sender, self.run_dir)
        if client is not None:
            client.set_version(self.learner.version)

    def resume_note(self) -> str:
        """The console's line when `start` skipped a corrupt checkpoint or resumed an
        unverified one ("" otherwise)."""
        return (self.resume_report.line() if self.resume_report is not None else None) or ""

    def weights_endpoint(self) -> str:
        assert self.weight_sender is not None, "rank 0's weight sender is bound by `connect`"
        return advertised(self.weight_sender.endpoint, self.cfg.launch.bind_host)

    def version(self) -> int:
        return self.learner.version

    def publish(self) -> None:
        """Publish the current weights (actors joining a resumed run catch up)."""
        self._on_worker(self.learner.publish)

    def update(self) -> dict[str, Any]:
        """One learner update (+ its periodic checkpoint): metrics, the staleness and
        importance-weight histograms, and its episode sample (rows; [] at most updates)."""
        metrics = self._on_worker(self.learner.run_once)
        return {"metrics": metrics, "staleness_hist": self.learner.last_staleness_hist,
                "is_weight_hist": self.learner.last_is_weight_hist,
                "episodes": self.learner.last_episodes}

    def set_buffer(self, control_endpoint: str) -> None:
        """Runs on Ray's second thread: the buffer restarted on another node; rank 0's client
        talks to it from its next try on (`BufferClient.retarget`)."""
        if self.client is not None:
            self.client.retarget(control_endpoint)

    def stop_waiting(self) -> None:
        """Runs on Ray's second thread while an update may hold the worker: an update waiting
        for data ends (`Learner.stop_waiting`), so a final checkpoint can run."""
        if self.learner is not None:
            self.learner.stop_waiting()

    def save_checkpoint(self) -> str:
        return str(self._on_worker(self.learner.save_checkpoint))


class LearnerGroup:
    """`learner.world_size` LearnerHost ranks in a placement group, started as one unit."""

    def __init__(self, cfg: RunConfig, run_dir: Path, control_endpoint: str, resume: bool,
                 curve: RunKeys | None, wait: bool = True) -> None:
        """`wait` False: return once rank 0's weights endpoint is bound, while the ranks still
        load the model (`wait_started` waits for that): the launcher starts the actors
        meanwhile."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from agent_r1_async.learner import memory_savers

        lc = cfg.learner
        self.ray = ray
        self.resume = resume
        bundle = {"CPU": lc.num_cpus, **({"GPU": lc.num_gpus} if lc.num_gpus else {}),
                  **lc.resources}
        self.pg = placement_group([dict(bundle) for _ in range(lc.world_size)], strategy="PACK")
        ray.get(self.pg.ready())
        cls = ray.remote(num_cpus=lc.num_cpus, num_gpus=lc.num_gpus, max_concurrency=2)(LearnerHost)
        proc_env = memory_savers.learner_process_env(lc.allocator)  # set at process start
        env = {"runtime_env": {"env_vars": {**ENV, **proc_env}}}
        self.ranks = [
            cls.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=r), **env).remote(
                cfg, r, str(run_dir), keys_for(curve, LEARNER, binds=True))
            for r in range(lc.world_size)
        ]
        master = ray.get(self.ranks[0].rendezvous.remote())
        self.leader = self.ranks[0]
        ray.get(self.leader.connect.remote(control_endpoint))
        # All at once: joining the process group blocks until every rank is in.
        self._starting = [r.start.remote(master, control_endpoint, resume) for r in self.ranks]
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Until every rank has built its Learner; raises as one rank fails."""
        from agent_r1_async.learner.checkpoint import NoIntactCheckpoint

        try:
            self._wait(self._starting)
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, NoIntactCheckpoint):
                raise NoIntactCheckpoint(str(e.cause)) from None
            raise
        note = self.ray.get(self.leader.resume_note.remote()) if self.resume else ""
        if note:
            print(f"[launch] {note}", file=sys.stderr, flush=True)

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Run `method` on every rank (a collective); rank 0's result. Raises as one
        rank fails (the others may then wait in a collective for good: `kill` them), and
        `TimeoutError` when a rank has not answered within `timeout_s`."""
        return self._wait([getattr(r, method).remote(*args) for r in self.ranks],
                          timeout_s, what=f"learner {method}")

    def _wait(self, refs: list[Any], timeout_s: float | None = None, what: str = "") -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = self.ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")
            self.ray.get(done[0])
        return self.ray.get(refs[0])

    def submit(self, method: str) -> list[Any]:
        return [getattr(r, method).remote() for r in self.ranks]

    def dead_rank(self, refs: list[Any], ready: list[Any]) -> tuple[int, Exception] | None:
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

    def kill(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for r in self.ranks:
            with contextlib.suppress(Exception):
                self.ray.kill(r, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(self.pg)


def learner_role(rank: int, world_size: int) -> str:
    """How the console names a rank: "learner" alone, or "learner rank N" of several."""
    return "learner" if world_size == 1 else f"learner rank {rank}"


class RankWatch:
    """The learner ranks' liveness (liveness.py): each rank answering `progress()` on Ray's
    second thread, or named unresponsive with its last answer. `start` sends the probes of an
    update; after a group restart `forget` drops what was said of the old ranks."""

    def __init__(self, ray: Any, liveness: Liveness, events: Events, log_dir: Path) -> None:
        self.ray, self.liveness, self.events, self.log_dir = ray, liveness, events, log_dir
        self.probes: list[Probe] = []
        self.seen: dict[int, dict[str, Any]] = {}
        """Each rank's last answer (what its worker ran, for how long)."""

    def start(self, ranks: list[Any]) -> None:
        self.probes = [Probe(self.ray, rank.progress.remote, PROBE_EVERY_S) for rank in ranks]

    def look(self) -> None:
        for rank, probe in enumerate(self.probes):
            try:
                answered, seen = probe.poll()
            except Exception:  # a dead rank: its update's reference says so
                continue
            if answered:
                self.seen[rank] = seen
            last = self.seen.get(rank)
            doing = (f"its last answer: {last['doing']} for {float(last['for_s']):.0f} s"
                     if last else "no answer yet")
            log = self.log_dir / f"learner-{rank}.log"
            judge(self.liveness, self.events, learner_role(rank, len(self.probes)),
                  probe.silent_s(), f"{doing}; log: {log}")

    def forget(self) -> None:
        for rank in range(len(self.probes)):  # a new group: what was said of the old one
            self.liveness.forget(learner_role(rank, len(self.probes)))
        self.seen = {}

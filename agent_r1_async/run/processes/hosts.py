"""Process hosts: build one component with its own ZeroMQ transport inside a Ray worker.

Ray stays at the edge. Buffer, learner and actor are plain classes (tests build them
directly); these hosts only give each one a process-local `ZmqTransport`, pin its torch thread
count to the CPUs Ray reserved for it, and expose a few methods the launcher calls. The
launcher wraps them with `ray.remote(...)`; Ray itself is imported only to learn this
node's address (`advertised`).

Only small control values cross Ray (endpoints, metric dicts); all data moves over ZeroMQ.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agent_r1_async.config import RunConfig
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport

if TYPE_CHECKING:
    from agent_r1_async.buffers.validate import RecordBounds


def struct_to_dict(obj: Any) -> Any:
    """Wire structs are array_like (positional); give the launcher named fields instead."""
    if isinstance(obj, msgspec.Struct):
        return {f: struct_to_dict(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, dict):
        return {k: struct_to_dict(v) for k, v in obj.items()}
    return obj


def _pin_threads(num_cpus: float) -> None:
    n = max(1, math.ceil(num_cpus))
    os.environ["OMP_NUM_THREADS"] = str(n)
    import torch

    torch.set_num_threads(n)


def advertised(endpoint: str, bind_host: str) -> str:
    """A socket bound to 0.0.0.0 is reached through this node's address."""
    if bind_host not in ("0.0.0.0", "*"):
        return endpoint
    return f"tcp://{node_ip()}:{endpoint.rsplit(':', 1)[1]}"


def on_this_node(cfg: RunConfig) -> RunConfig:
    """`cfg` as this process uses it: `launch.bind_host: node` becomes this node's address,
    so every socket it binds is on its own node (a cluster of several nodes)."""
    if cfg.launch.bind_host != "node":
        return cfg
    launch = msgspec.structs.replace(cfg.launch, bind_host=node_ip())
    return msgspec.structs.replace(cfg, launch=launch)


def where() -> dict[str, str]:
    """This process's Ray node: {"node_id": ..., "ip": ...} (the launch's placement line and
    its node-loss events)."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "ip": node_ip()}


def node_ip() -> str:
    """This node's address as the other nodes of the Ray cluster reach it."""
    import socket

    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # not inside Ray: fall back to the host name's address
        return socket.gethostbyname(socket.gethostname())


def _exit_broken_buffer(exc: BaseException) -> None:
    """The buffer's loop is broken for good (its final snapshot is written): end this process
    so that supervision sees a dead buffer, instead of a live process serving nothing."""
    import sys

    print(f"buffer: service loop broken ({type(exc).__name__}: {exc}); exiting", file=sys.stderr,
          flush=True)
    os._exit(70)


def own_log(cfg: RunConfig, log_dir: str | None, role: str, index: int | None = None) -> None:
    """This Ray worker's output goes to RUN_DIR/logs/<role>[-<index>].log (run/output/logs.py), not
    to the launch's console; with `logging.verbose` Ray forwards it to the console instead."""
    if log_dir and not cfg.logging.verbose:
        from agent_r1_async.run.output.logs import log_file, redirect_output

        redirect_output(log_file(log_dir, role, index))


class _Host:
    """What the launcher asks every process: its pid (RUN_DIR/*.pid, drills) and its node."""

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, str]:
        return where()


class BufferHost(_Host):
    """`bounds`: the run's record bounds, built once by the launch (`SupervisedBuffer`,
    run/processes/buffer_group.py) and the same for every restart. `bind`: the endpoints to
    bind (a restarted buffer takes its predecessor's); default: free ports on
    `launch.bind_host`. `pid_file`: where this process writes its pid."""

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


_LEARNER_CLIENT_RETRIES = 12
_WORK = {"step": "an update", "_start": "loading the model", "_connect": "connecting",
         "publish": "publishing weights", "save_checkpoint": "a checkpoint"}
"""What `LearnerHost.progress` calls each of its worker's functions."""


class LearnerHost(_Host):
    """One learner rank. `learner.world_size` of them form a group (supervisor.LearnerGroup):
    built cheap, then `start` on all ranks at once joins the process group at rank 0's
    `rendezvous` address (FSDP2 from there on, learner/trainer.py) and builds the Learner.
    Rank 0 alone talks to the buffer and publishes weights; every rank runs every update."""

    def __init__(self, cfg: RunConfig, rank: int, run_dir: str, curve: CurveKeys | None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        own_log(cfg, str(Path(run_dir) / "logs"), "learner", rank)
        cfg = on_this_node(cfg)
        _pin_threads(cfg.learner.num_cpus)
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
        self.publisher: Any = None
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
        """What this rank's worker thread runs and for how long: {"doing": ..., "for_s": ...}.
        Answered on Ray's second thread, so a rank that answers is alive however long its
        update or checkpoint takes (the launcher's liveness, run/processes/supervisor.py);
        a stopped process, or one holding the GIL for good, does not answer."""
        doing, since = self._doing
        return {"doing": doing, "for_s": time.monotonic() - since}

    def connect(self, control_endpoint: str) -> None:
        """Rank 0: the buffer client and the bound weight sender, before the model loads, so
        the launcher can start the actors (they need the weights endpoint) while `start`
        builds the Learner. Other ranks: nothing."""
        self._on_worker(self._connect, control_endpoint)

    def _connect(self, control_endpoint: str) -> None:
        from agent_r1_async.weights.backends import make_weight_sender
        from agent_r1_async.wire.buffer_client import BufferClient

        if self.rank != 0 or self.publisher is not None:
            return
        self.transport = ZmqTransport(curve=self.curve)
        # Enough tries to outlast a buffer restart (run/processes/buffer_group.py) on a loaded
        # machine: the launcher, not this client, gives up on a buffer that stays dead.
        self.client = BufferClient(self.transport, control_endpoint, "learner", "learner",
                                   retries=_LEARNER_CLIENT_RETRIES)
        self.client.connect()
        self.publisher = make_weight_sender(self.cfg, self.transport)  # weights.backend

    def start(self, master: tuple[str, int], control_endpoint: str, resume: bool) -> None:
        """Join the group (world_size > 1, or CPU offload, which needs FSDP2) and build the
        Learner, from the latest checkpoint when resuming; a collective over the ranks."""
        self._on_worker(self._start, master, control_endpoint, resume)

    def _start(self, master: tuple[str, int], control_endpoint: str, resume: bool) -> None:
        from agent_r1_async.learner import distributed
        from agent_r1_async.learner.checkpoint import latest_checkpoint, resume_intact
        from agent_r1_async.learner.loop import Learner
        from agent_r1_async.learner.trainer import resolve_device

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
                    self.cfg, client, self.publisher, self.run_dir, checkpoint_dir=ckpt))
        else:
            self.learner = Learner(self.cfg, client, self.publisher, self.run_dir)
        if client is not None:
            client.set_version(self.learner.version)

    def resume_note(self) -> str:
        """The console's line when `start` skipped a corrupt checkpoint or resumed an
        unverified one ("" otherwise)."""
        return (self.resume_report.line() if self.resume_report is not None else None) or ""

    def weights_endpoint(self) -> str:
        return advertised(self.publisher.endpoint, self.cfg.launch.bind_host)

    def version(self) -> int:
        return self.learner.version

    def publish(self) -> None:
        """Publish the current weights (actors joining a resumed run catch up)."""
        self._on_worker(self.learner.publish)

    def update(self) -> dict[str, Any]:
        """One learner update (+ its periodic checkpoint): metrics, the staleness and
        importance-weight histograms, and its episode sample (rows; [] at most updates)."""
        metrics = self._on_worker(self.learner.step)
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


def log_to(path: str) -> None:
    """This process's `agent_r1_async` log records (INFO and up) go to `path`; WARNING and up
    also to stderr (which Ray forwards to the launcher's console) unless logging is set up."""
    import logging
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pkg = logging.getLogger("agent_r1_async")
    pkg.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not any(getattr(h, "baseFilename", None) == str(Path(path).resolve()) for h in pkg.handlers):
        file = logging.FileHandler(path)
        file.setFormatter(fmt)
        pkg.addHandler(file)
    if not logging.getLogger().handlers and not any(
        type(h) is logging.StreamHandler for h in pkg.handlers
    ):
        console = logging.StreamHandler()
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        pkg.addHandler(console)


class ActorHost(_Host):
    def __init__(
        self, cfg: RunConfig, actor_id: str, endpoints: dict[str, str], curve: CurveKeys | None,
        log_dir: str | None = None,
    ) -> None:
        if log_dir and not cfg.logging.verbose:  # everything this process says: its own file
            own_log(cfg, log_dir, actor_id)
        elif log_dir:  # env errors (logged once each) reach RUN_DIR/logs/ and the console
            log_to(os.path.join(log_dir, f"{actor_id}.log"))
        _pin_threads(cfg.actors.num_cpus)
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

"""Process hosts: build one component with its own ZeroMQ transport inside a Ray worker.

Ray stays at the edge. Buffer, learner and actor are plain classes (tests build them
directly); these hosts only give each one a process-local `ZmqTransport`, pin its torch thread
count to the CPUs Ray reserved for it, and expose a few methods the launcher calls. The
launcher wraps them with `ray.remote(...)`; nothing here imports Ray.

Only small control values cross Ray (endpoints, metric dicts); all data moves over ZeroMQ.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import msgspec

from agent_r1_async.config import RunConfig
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.zmq import CurveKeys, ZmqTransport


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
    import socket

    port = endpoint.rsplit(":", 1)[1]
    try:
        import ray

        ip = ray.util.get_node_ip_address()
    except Exception:  # not inside Ray: fall back to the host name's address
        ip = socket.gethostbyname(socket.gethostname())
    return f"tcp://{ip}:{port}"


class BufferHost:
    def __init__(
        self, cfg: RunConfig, snapshot_dir: str | None, curve: CurveKeys | None, resume: bool
    ) -> None:
        from agent_r1_async.buffers.service import BufferService
        from agent_r1_async.models import model_vocab_size

        if cfg.buffer.vocab_size == 0:  # range-check token ids against the policy's vocabulary
            cfg = msgspec.structs.replace(cfg, buffer=msgspec.structs.replace(
                cfg.buffer, vocab_size=model_vocab_size(cfg.model.name_or_path)))
        self.cfg = cfg
        self.transport = ZmqTransport(curve=curve)
        host = cfg.launch.bind_host
        self.service = BufferService(
            cfg.buffer,
            cfg.algorithm,
            self.transport,
            data_endpoint=tcp_endpoint(host),
            control_endpoint=tcp_endpoint(host),
            snapshot_dir=snapshot_dir,
            fresh_actors=resume,  # a relaunch starts new actors: the old ones' credits are void
        )
        self.service.start()

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


class LearnerHost:
    def __init__(
        self,
        cfg: RunConfig,
        control_endpoint: str,
        run_dir: str,
        resume: bool,
        curve: CurveKeys | None,
    ) -> None:
        _pin_threads(cfg.learner.num_cpus)
        from agent_r1_async.learner.checkpoint import latest_checkpoint
        from agent_r1_async.learner.loop import Learner
        from agent_r1_async.wire.buffer_client import BufferClient
        from agent_r1_async.wire.weight_channel import make_weight_sender

        self.cfg = cfg
        self.transport = ZmqTransport(curve=curve)
        self.client = BufferClient(self.transport, control_endpoint, "learner", "learner")
        self.client.connect()
        self.publisher = make_weight_sender(cfg, self.transport)  # weights.backend
        if resume and latest_checkpoint(run_dir) is not None:
            self.learner = Learner.from_checkpoint(
                cfg, self.transport, self.client, self.publisher, run_dir
            )
        else:
            self.learner = Learner(cfg, self.transport, self.client, self.publisher, run_dir)
        self.client.set_version(self.learner.version)

    def weights_endpoint(self) -> str:
        return advertised(self.publisher.endpoint, self.cfg.launch.bind_host)

    def version(self) -> int:
        return self.learner.version

    def publish(self) -> None:
        """Publish the current weights (actors joining a resumed run catch up)."""
        self.learner.publish()

    def update(self) -> dict[str, Any]:
        """One learner update: its metrics and the batch's staleness histogram."""
        metrics = self.learner.update()
        if self.learner.updates % self.cfg.learner.checkpoint_every == 0:
            metrics["checkpoint_saved"] = 1.0
            self.learner.save_checkpoint()
        return {"metrics": metrics, "staleness_hist": self.learner.last_staleness_hist}

    def save_checkpoint(self) -> str:
        return str(self.learner.save_checkpoint())


class ActorHost:
    def __init__(
        self, cfg: RunConfig, actor_id: str, endpoints: dict[str, str], curve: CurveKeys | None
    ) -> None:
        _pin_threads(cfg.actors.num_cpus)
        self.cfg = cfg
        self.curve = curve
        self.actor_id = actor_id
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

    def pid(self) -> int:
        return os.getpid()

    def stop(self) -> None:
        self._stop.set()

"""Learner side of the native weight backends (weights.backend: vllm_gloo | vllm_nccl |
vllm_ipc).

    sender = NativeWeightSender("vllm_gloo", bind_host, port, timeout_s)
    sender.publish(version, state_dict)   # snapshot + checksum, returns; pairs send it

Membership: one pair per actor (a two-rank group on gloo and NCCL; on ipc the actor's engine
opening CUDA IPC handles of the sender's tensors), formed when the actor joins through the
store (rendezvous.py). Each pair has its own thread running a vLLM trainer engine (ours on
gloo and ipc, vLLM's `NCCLTrainerWeightTransferEngine` on NCCL) and sends the newest version
it has not sent yet; a version published while a pair is busy is skipped for the newer one.
Pairs are independent: an actor that is slow, dies or never joins fails only its own pair,
after `timeout_s` (logged, counted in `failed` / `join_failures`); the others keep receiving.
An actor whose pair failed re-joins as a new pair and gets the current version at once. A
restarted learner starts a new store: actors re-join it once the launcher gives them its
endpoint. One pair per actor costs the learner one send per actor (a broadcast tree would
cost one); it buys isolation, which is what the peer systems' hang reports lacked.

A version is snapshotted once at `publish`: each tensor placed where the backend sends from
(placement.py: CPU for gloo; for NCCL and IPC the sender's CUDA device, `cuda_device`: the
device each pair's NCCL rank is created on, and the memory ipc's handles export), then turned
into the stream the backend sends (`sent_tensors`) and checksummed over that very stream, so
what a pair sends and what its checksum covers are one list.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightSource,
)

from agent_r1_async.weights.placement import send_device
from agent_r1_async.weights.rendezvous import StorePairClient, serve_store
from agent_r1_async.weights.seam import ChecksumMismatch, sampled_checksum, sent_tensors

log = logging.getLogger(__name__)
_ACCEPT_POLL_S = 0.05


Stream = list[tuple[str, torch.Tensor]]
"""What a backend sends for one version, in order (`sent_tensors`)."""


@dataclass
class _Version:
    version: int
    stream: Stream
    """`sent_tensors` of the placed snapshot: exactly what each pair sends."""
    checksum: str
    """`sampled_checksum(stream)`."""
    published_at: float


def prepare(tensors: dict[str, torch.Tensor], backend: str) -> tuple[Stream, str]:
    """The stream `backend` sends for `tensors` (already placed) and its checksum, computed
    over that same stream (a worker recomputes it over what it receives)."""
    stream = sent_tensors(tensors, backend)
    return stream, sampled_checksum(stream)


class SnapshotSource(WeightSource):
    """vLLM's `WeightSource` over the stream a pair is sending; `set` before each
    `send_weights` (the trainer engine keeps one source for its lifetime). It yields the
    stream as given, so metadata, bytes and checksum describe one list."""

    def __init__(self) -> None:
        self._stream: Stream = []

    def set(self, stream: Stream) -> None:
        self._stream = list(stream)

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(k, v.dtype, tuple(v.shape)) for k, v in self._stream]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self._stream)


def _cast(stream: Stream, dtype: torch.dtype) -> Stream:
    """`stream` with floating tensors in `dtype`; a tensor that appears twice (a tied head
    on NCCL) is cast once and stays one tensor."""
    done: dict[int, torch.Tensor] = {}
    out = []
    for name, t in stream:
        if id(t) not in done:
            done[id(t)] = t.to(dtype) if t.is_floating_point() else t
        out.append((name, done[id(t)]))
    return out


_FROM_CUDA = ("vllm_nccl", "vllm_ipc")
"""The backends that send from the sender's CUDA device (placement.py)."""


def sender_cuda_device(backend: str, requested: str | None = None) -> str | None:
    """vllm_nccl / vllm_ipc: the CUDA device this sender sends from, `cuda:N` (`requested`,
    e.g. the learner's `cuda:1`; else this process's current device): NCCL creates its ranks
    there, IPC exports its memory. Other backends: None. Such a sender in a process without
    CUDA is an error here, before anything is bound."""
    if backend not in _FROM_CUDA:
        return None
    if not torch.cuda.is_available():
        raise RuntimeError(f"weights.backend {backend} sends from a CUDA device; this process "
                           "sees none (use weights.backend zmq or vllm_gloo)")
    device = torch.device(requested or "cuda")
    if device.type != "cuda":
        raise ValueError(f"weights.backend {backend} sends from a CUDA device, not {requested!r}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index}"


class NativeWeightSender:
    """`WeightSender` over vLLM's weight-transfer API (see module docstring)."""

    def __init__(
        self, backend: str, bind_host: str, port: int = 0, timeout_s: float = 30.0,
        cuda_device: str | None = None,
    ) -> None:
        if backend not in ("vllm_gloo", *_FROM_CUDA):
            raise ValueError(f"weights.backend {backend!r} is not a native backend")
        self.cuda_device = sender_cuda_device(backend, cuda_device)
        """vllm_nccl / vllm_ipc: where every sent tensor lives (the pairs' NCCL device, the
        memory IPC exports); else None."""
        from agent_r1_async.weights.vllm_plugin import register

        register()  # our trainer engine in vLLM's trainer factory (this process)
        self.backend = backend
        self.bind_host = bind_host
        self.timeout_s = timeout_s
        self.store, self.port = serve_store(bind_host, port, timeout_s)
        self.token = secrets.token_hex(16)
        self.endpoint = f"tcp://{bind_host}:{self.port}/{self.token}"
        self.published = 0
        self.sent = 0
        """Versions acknowledged by an actor (summed over actors)."""
        self.failed = 0
        self.rejected = 0
        self.join_failures = 0
        self.pairs_joined = 0
        self._latest: _Version | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._acked: dict[str, int] = {}
        self._casts: dict[tuple[int, str], tuple[Stream, str]] = {}
        accept = threading.Thread(target=self._accept, name="weights-accept", daemon=True)
        accept.start()
        self._threads.append(accept)

    # ------------------------------------------------------------------ learner API

    def publish(
        self, version: int, state_dict: dict[str, torch.Tensor], copy: bool = True
    ) -> _Version:
        """Snapshot (so training may go on at once) and hand to every pair's thread.

        Each tensor ends up contiguous on `send_device(backend, its device, cuda_device)`
        (placement.py): moved there when it is elsewhere (the move is the copy); `copy=False`:
        the caller hands over tensors it will not touch again (the learner's freshly gathered
        CPU copies), so one already there and contiguous is sent as it is. On NCCL and IPC
        the copies have landed on the device before any pair's stream (or engine) reads them.
        """
        started = time.time()
        tensors = {k: self._owned(v, copy) for k, v in state_dict.items()}
        if self.cuda_device is not None:
            torch.cuda.current_stream(self.cuda_device).synchronize()
        stream, checksum = prepare(tensors, self.backend)
        snap = _Version(version, stream, checksum, started)
        with self._cond:
            self._latest = snap
            self.published += 1
            self._cond.notify_all()
        return snap

    def _owned(self, v: torch.Tensor, copy: bool) -> torch.Tensor:
        """`v` as this sender sends it: contiguous on its send device, and the sender's own
        unless `copy=False` allows the caller's tensor itself."""
        v = v.detach()
        dest = send_device(self.backend, str(v.device), self.cuda_device)
        if str(v.device) != dest:
            return v.to(dest, memory_format=torch.contiguous_format)
        if copy or not v.is_contiguous():
            return v.clone(memory_format=torch.contiguous_format)
        return v

    def acked(self) -> dict[str, int]:
        """Newest version each actor acknowledged (actor id → version)."""
        with self._cond:
            return dict(self._acked)

    def wait_acked(self, version: int, actors: int = 1, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while sum(v >= version for v in self._acked.values()) < actors:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=self.timeout_s + 5)

    # ------------------------------------------------------------------ pairs

    def _accept(self) -> None:
        seen = 0
        while not self._closed:
            joined = self.store.add(f"{self.token}/joins", 0)
            for n in range(seen + 1, joined + 1):
                t = threading.Thread(target=self._serve_pair, args=(n,), name=f"weights-pair-{n}",
                                     daemon=True)
                t.start()
                self._threads.append(t)
            seen = joined
            time.sleep(_ACCEPT_POLL_S)

    def _init_info(self, prefix: str) -> TrainerInitInfo:
        if self.backend == "vllm_gloo":
            from agent_r1_async.weights.gloo import GlooTrainerInitInfo

            return GlooTrainerInitInfo(rank=0, host=self.bind_host, port=self.port,
                                       prefix=f"{prefix}/pg", timeout_s=self.timeout_s)
        if self.backend == "vllm_ipc":
            from agent_r1_async.weights.ipc import IpcTrainerInitInfo

            return IpcTrainerInitInfo(rank=0, device=self.cuda_device or "")
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        from agent_r1_async.weights.rendezvous import free_port

        return NCCLTrainerInitInfo(rank=0, master_address=self.bind_host,
                                   master_port=free_port(self.bind_host), world_size=2)

    def _serve_pair(self, n: int) -> None:
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from agent_r1_async.weights.rendezvous import wait_get

        prefix = f"{self.token}/pair/{n}"
        try:
            if self.cuda_device is not None:  # NCCL opens its rank here; IPC exports from here
                torch.cuda.set_device(self.cuda_device)
            actor = wait_get(self.store, f"{self.token}/join/{n}", self.timeout_s,
                             f"pair {n} registered no actor id").decode()
            dtype_key = f"{self.token}/join/{n}/dtype"
            dtype = self.store.get(dtype_key).decode() if self.store.check([dtype_key]) else None
            client = StorePairClient(self.store, prefix, actor, self.timeout_s)
            source = SnapshotSource()
            engine = WeightTransferTrainerFactory.trainer_init(
                self._init_info(prefix), client=client, source=source)
        except Exception as e:
            self.join_failures += 1
            log.error("weights: pair %d did not form: %s", n, e)
            return
        self.pairs_joined += 1
        log.info("weights: actor %s joined (pair %d, %s)", actor, n, self.backend)
        try:
            self._send_loop(engine, client, source, actor, dtype)
        finally:
            engine.shutdown()

    def _in_dtype(self, snap: _Version, dtype: str | None) -> tuple[Stream, str]:
        """The snapshot's stream with floating tensors in the actor's dtype, and the checksum
        of that cast stream; cast once per (version, dtype) and shared by the pairs that want
        it (newest version only)."""
        if dtype is None or all(
            str(t.dtype).removeprefix("torch.") == dtype or not t.is_floating_point()
            for _, t in snap.stream
        ):
            return snap.stream, snap.checksum
        key = (snap.version, dtype)
        with self._cond:
            hit = self._casts.get(key)
        if hit is None:
            cast = _cast(snap.stream, getattr(torch, dtype))
            if self.cuda_device is not None:
                torch.cuda.current_stream(self.cuda_device).synchronize()
            hit = (cast, sampled_checksum(cast))
            with self._cond:
                self._casts = {k: v for k, v in self._casts.items() if k[0] >= snap.version}
                self._casts[key] = hit
        return hit

    def _send_loop(
        self, engine: TrainerWeightTransferEngine[Any], client: StorePairClient,
        source: SnapshotSource, actor: str, dtype: str | None,
    ) -> None:
        sent = -1
        while True:
            with self._cond:
                while not self._closed and (self._latest is None or self._latest.version <= sent):
                    self._cond.wait()
                snap = self._latest
                if self._closed or snap is None:  # not closed: the wait ended on a new version
                    return
            stream, checksum = self._in_dtype(snap, dtype)
            source.set(stream)
            client.stage(snap.version, checksum, snap.published_at)
            try:
                engine.send_weights()
            except ChecksumMismatch as e:  # the group is fine; the next version may pass
                self.rejected += 1
                log.error("weights: v%d rejected by %s: %s", snap.version, actor, e)
                sent = snap.version
                continue
            except Exception as e:  # timeout, dead peer: this pair is over, the actor re-joins
                self.failed += 1
                log.error("weights: sending v%d to %s failed, dropping its pair: %s",
                          snap.version, actor, e)
                return
            sent = snap.version
            with self._cond:
                self.sent += 1
                self._acked[actor] = snap.version
                self._cond.notify_all()

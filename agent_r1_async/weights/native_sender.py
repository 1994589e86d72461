"""Learner side of the native weight backends (weights.backend: vllm_gloo | vllm_nccl).

    sender = NativeWeightSender("vllm_gloo", bind_host, port, timeout_s)
    sender.publish(version, state_dict)   # snapshot + checksum, returns; pairs send it

Membership: one two-rank group per actor ("pair"), formed when the actor joins through the
store (rendezvous.py). Each pair has its own thread running a vLLM trainer engine (ours on
gloo, vLLM's `NCCLTrainerWeightTransferEngine` on NCCL) and sends the newest version it has
not sent yet; a version published while a pair is busy is skipped for the newer one. Pairs
are independent: an actor that is slow, dies or never joins fails only its own pair, after
`timeout_s` (logged, counted in `failed` / `join_failures`); the others keep receiving. An
actor whose pair failed re-joins as a new pair and gets the current version at once. A
restarted learner starts a new store: actors re-join it once the launcher gives them its
endpoint. One pair per actor costs the learner one send per actor (a broadcast tree would
cost one); it buys isolation, which is what the peer systems' hang reports lacked.
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

from agent_r1_async.weights.rendezvous import StorePairClient, serve_store
from agent_r1_async.weights.seam import ChecksumMismatch, sampled_checksum

log = logging.getLogger(__name__)
_ACCEPT_POLL_S = 0.05


@dataclass
class _Version:
    version: int
    tensors: dict[str, torch.Tensor]
    checksum: str
    published_at: float


class SnapshotSource(WeightSource):
    """vLLM's `WeightSource` over the newest snapshot a pair is sending; `set` before each
    `send_weights` (the trainer engine keeps one source for its lifetime)."""

    def __init__(self) -> None:
        self._items: dict[str, torch.Tensor] = {}

    def set(self, tensors: dict[str, torch.Tensor], tied_head: bool) -> None:
        items = dict(tensors)
        # The learner publishes a tied head once, as the embedding; vLLM's NCCL worker loads
        # what it is sent (our gloo worker adds the head itself, saving the bytes).
        if tied_head and "lm_head.weight" not in items and "model.embed_tokens.weight" in items:
            items["lm_head.weight"] = items["model.embed_tokens.weight"]
        self._items = items

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(k, v.dtype, tuple(v.shape)) for k, v in self._items.items()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self._items.items())


class NativeWeightSender:
    """`WeightSender` over vLLM's weight-transfer API (see module docstring)."""

    def __init__(self, backend: str, bind_host: str, port: int = 0, timeout_s: float = 30.0) -> None:
        if backend not in ("vllm_gloo", "vllm_nccl"):
            raise ValueError(f"weights.backend {backend!r} is not a native backend")
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
        self._casts: dict[tuple[int, str], tuple[dict[str, torch.Tensor], str]] = {}
        accept = threading.Thread(target=self._accept, name="weights-accept", daemon=True)
        accept.start()
        self._threads.append(accept)

    # ------------------------------------------------------------------ learner API

    def publish(
        self, version: int, state_dict: dict[str, torch.Tensor], copy: bool = True
    ) -> _Version:
        """Snapshot (so training may go on at once) and hand to every pair's thread.

        `copy=False`: the caller hands over tensors it will not touch again (the learner's
        freshly gathered weights); they are sent as they are when already where the backend
        sends from (CPU for gloo, the device for NCCL) and contiguous.
        """
        started = time.time()
        nccl = self.backend == "vllm_nccl"

        def owned(v: torch.Tensor) -> torch.Tensor:
            v = v.detach()
            if not copy and v.is_contiguous() and (nccl or v.device.type == "cpu"):
                return v
            # NCCL sends from the GPU: keep the copy on the tensors' device
            return v.clone().contiguous() if nccl else v.to("cpu", copy=True).contiguous()

        tensors = {k: owned(v) for k, v in state_dict.items()}
        snap = _Version(version, tensors, sampled_checksum(tensors.items()), started)
        with self._cond:
            self._latest = snap
            self.published += 1
            self._cond.notify_all()
        return snap

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
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        from agent_r1_async.weights.rendezvous import free_port

        return NCCLTrainerInitInfo(rank=0, master_address=self.bind_host,
                                   master_port=free_port(self.bind_host), world_size=2)

    def _serve_pair(self, n: int) -> None:
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from agent_r1_async.weights.rendezvous import wait_get

        prefix = f"{self.token}/pair/{n}"
        try:
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

    def _in_dtype(
        self, snap: _Version, dtype: str | None
    ) -> tuple[dict[str, torch.Tensor], str]:
        """The snapshot with floating tensors in the actor's dtype, and its checksum; cast
        once per (version, dtype) and shared by the pairs that want it (newest version only)."""
        if dtype is None or all(
            str(t.dtype).removeprefix("torch.") == dtype or not t.is_floating_point()
            for t in snap.tensors.values()
        ):
            return snap.tensors, snap.checksum
        key = (snap.version, dtype)
        with self._cond:
            hit = self._casts.get(key)
        if hit is None:
            target = getattr(torch, dtype)
            cast = {k: v.to(target) if v.is_floating_point() else v
                    for k, v in snap.tensors.items()}
            hit = (cast, sampled_checksum(cast.items()))
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
            tensors, checksum = self._in_dtype(snap, dtype)
            source.set(tensors, tied_head=self.backend == "vllm_nccl")
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

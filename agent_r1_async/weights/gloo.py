"""vLLM weight-transfer engines over torch.distributed gloo (weights.backend: vllm_gloo).

`GlooWeightTransferEngine` implements vLLM's `WeightTransferEngine` (it runs inside vLLM's
worker, which builds it from `WeightTransferConfig(backend="agent_r1_gloo")` through the
factory our plugin registers); `GlooTrainerWeightTransferEngine` is its trainer-side peer
(`WeightTransferTrainerFactory`). Same shape as vLLM's NCCL pair, for CPU machines and CI.

Design choices
- Bytes, not dtypes: every tensor travels as a uint8 view (gloo has no bf16 on every build);
  the worker views it back with the dtype and shape of the update info. All broadcasts are
  issued at once and then waited for, each with the group's timeout (pipelined, bounded).
- Verify before touching the model: the worker receives the whole version into its own
  buffers, checks `sampled_checksum` of the received stream (every tensor, in the order
  received) against the learner's checksum of the stream it sent (`sent_tensors(...,
  "vllm_gloo")`, seam.py), and only then starts vLLM's
  layerwise reload (which moves layers to the meta device) and loads. A timeout, a dead
  learner or a mismatch therefore leaves the model serving its previous weights intact.
  Cost: one version of transient memory on the actor.
- A tied `lm_head` is not on the wire (seam.py `TIED_HEAD_ON_WIRE`): after the checksum
  passes, the worker loads it from the received embedding (`with_tied_head`), as the ZeroMQ
  path does (vllm.py `_for_vllm`).
- Bounded waits: forming the group waits on the learner's store with `timeout_s` (the
  store's timeout); every broadcast of a receive is waited for with `timeout_s`, so a learner
  that stalls or dies mid-transfer ends the receive with an error, the model untouched.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, cast

import torch
import torch.distributed as dist
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

# At import (when the worker builds the engine), not at the first update: this import takes
# seconds and would eat into that update's timeout.
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

from agent_r1_async.weights.rendezvous import gloo_group
from agent_r1_async.weights.seam import ChecksumMismatch, sampled_checksum, with_tied_head
from agent_r1_async.weights.vllm_plugin import GLOO, WorkerModel

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.weight_transfer import WeightTransferConfig


class _Broadcasts(Protocol):
    """The gloo group's own collective (torch's stubs leave it off `ProcessGroupGloo`)."""

    def broadcast(self, tensors: list[torch.Tensor], opts: dist.BroadcastOptions) -> dist.Work: ...


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """Worker side: where the learner's store is, and this group's key prefix."""

    host: str
    port: int
    prefix: str
    world_size: int = 2
    rank_offset: int = 1
    timeout_s: float = 30.0


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    version: int = -1
    checksum: str = ""
    """`sampled_checksum` of the stream the learner sends (`sent_tensors`); empty = not
    checked."""


def _broadcast_all(
    group: dist.ProcessGroupGloo, tensors: list[torch.Tensor], timeout_s: float
) -> None:
    """Broadcast from rank 0, in order; every wait is bounded by `timeout_s`."""
    import datetime

    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    works = [cast(_Broadcasts, group).broadcast([t], opts) for t in tensors]
    for w in works:
        w.wait(datetime.timedelta(seconds=timeout_s))


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(
        self, config: WeightTransferConfig, vllm_config: VllmConfig, device: torch.device,
        model: torch.nn.Module,
    ) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group: dist.ProcessGroupGloo | None = None
        self.timeout_s = 30.0
        self._loaded = False

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        pc = self.parallel_config
        rank = pc.data_parallel_index * pc.world_size + pc.rank + init_info.rank_offset
        self.timeout_s = init_info.timeout_s
        self.group = gloo_group(
            init_info.host, init_info.port, init_info.prefix, rank, init_info.world_size,
            init_info.timeout_s,
        )

    def start_weight_update(self) -> None:
        self._loaded = False  # the layerwise reload starts once the bytes are verified

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronizes an accelerator afterwards; gloo is synchronous on CPU.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer not initialized (init_weight_transfer_engine)")
        dtypes = [getattr(torch, d) for d in update_info.dtype_names]
        raw = [
            torch.empty(math.prod(s) * torch.empty((), dtype=d).element_size(), dtype=torch.uint8)
            for s, d in zip(update_info.shapes, dtypes, strict=True)
        ]
        _broadcast_all(self.group, raw, self.timeout_s)
        named = [
            (n, r.view(d).reshape(s))
            for n, r, d, s in zip(update_info.names, raw, dtypes, update_info.shapes, strict=True)
        ]
        got = sampled_checksum(named)
        if update_info.checksum and got != update_info.checksum:
            raise ChecksumMismatch(
                f"weights v{update_info.version}: checksum mismatch (learner "
                f"{update_info.checksum}, received {got}); version rejected, model unchanged"
            )
        self._load(named)

    def _load(self, named: list[tuple[str, torch.Tensor]]) -> None:
        self._load_into_model(with_tied_head(named))

    def _load_into_model(self, named: list[tuple[str, torch.Tensor]]) -> None:
        initialize_layerwise_reload(self.model)
        self._loaded = True
        cast(WorkerModel, self.model).load_weights(iter(named))

    def finish_weight_update(self) -> None:
        if self._loaded:
            finalize_layerwise_reload(self.model, self.model_config)
            self._loaded = False

    def shutdown(self) -> None:
        self.group = None  # gloo closes its pairs when the group is freed


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = GLOO

    host: str
    port: int
    prefix: str
    world_size: int = 2
    timeout_s: float = 30.0


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """Rank 0 of the group: sends every tensor of `source` each round (full resync)."""

    init_info_cls = GlooTrainerInitInfo

    def __init__(
        self, *, client: VLLMWeightSyncClient, source: WeightSource | None = None,
        is_sender: bool = True, timeout_s: float = 30.0,
    ) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.timeout_s = timeout_s
        self.group: dist.ProcessGroupGloo | None = None

    @classmethod
    def trainer_init(
        cls, init_info: GlooTrainerInitInfo, *, client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        if source is None:
            raise ValueError("the gloo trainer engine needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender,
                     timeout_s=init_info.timeout_s)
        if not engine.is_sender:
            return engine
        worker = GlooInitInfo(
            host=init_info.host, port=init_info.port, prefix=init_info.prefix,
            world_size=init_info.world_size, rank_offset=1, timeout_s=init_info.timeout_s,
        )
        # The worker blocks in its init RPC until both ranks meet: form ours meanwhile.
        with ThreadPoolExecutor(max_workers=1) as exe:
            future = exe.submit(client.init_weight_transfer_engine, asdict(worker))
            try:
                engine.group = gloo_group(init_info.host, init_info.port, init_info.prefix, 0,
                                          init_info.world_size, init_info.timeout_s)
            finally:
                future.result()  # bounded: the client's own waits time out too
        return engine

    def send_weights(self) -> None:
        assert self.source is not None
        meta = self.source.metadata()
        if not self.is_sender:
            for _ in self.source:  # stay in the trainer-side gathers (FSDP full_tensor)
                pass
            return
        assert self.group is not None, "trainer_init() first"
        info = GlooUpdateInfo(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
            shapes=[list(m.shape) for m in meta],
        )
        tensors = []
        for (name, t), m in zip(self.source, meta, strict=True):
            if name != m.name or tuple(t.shape) != m.shape or t.dtype != m.dtype:
                raise ValueError(f"WeightSource yielded {name!r} where metadata() says {m.name!r}")
            tensors.append(_as_bytes(t))
        self.client.start_weight_update()
        # A blocking client (Ray, HTTP) returns from update_weights only once the worker has
        # received everything: run it beside the broadcasts, as vLLM's NCCL trainer does.
        exe = ThreadPoolExecutor(max_workers=1)
        try:
            future = exe.submit(self.client.update_weights, asdict(info))
            _broadcast_all(self.group, tensors, self.timeout_s)
            future.result(timeout=self.timeout_s)
        finally:
            exe.shutdown(wait=False)  # never join a thread stuck on a dead peer
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.group = None

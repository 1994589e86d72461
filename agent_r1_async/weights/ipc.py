"""vLLM weight transfer over CUDA IPC, learner and engine on one GPU (weights.backend: vllm_ipc).

On a one-GPU machine the learner and the vLLM engine share the device, and NCCL refuses two
ranks of one group on one device. CUDA IPC needs no group: the learner exports a handle to
each sent tensor's CUDA memory, the engine's worker opens the handles and loads from that
memory in place; no weight byte crosses a socket.

- Learner: `IpcTrainerWeightTransferEngine`, ours (vLLM's trainer-factory key `agent_r1_ipc`,
  registered by vllm_plugin.py), driving one pair's `StorePairClient` (rendezvous.py): per
  version `start_weight_update`, one `update_weights` with every tensor's handle, then
  `finish_weight_update`, which waits (at most `weights.timeout_s`) for the actor's
  acknowledgement; the exported tensors are held until it returns. vLLM's own IPC trainer
  all-gathers the handles over the default process group, which a multi-rank learner's
  rank 0 would enter alone (only it publishes): ours touches no process group.
- Engine: `ChecksummedIpcWeightTransferEngine`, vLLM's `IPCWeightTransferEngine` (its rebuild
  of each tensor on the worker's device and its load) with a same-GPU check before any handle
  is opened and our checksum before anything is loaded.

Handles travel as JSON values (ipc_handles.py: never pickled): the learner's `update_weights`
payload carries them as `encoded_handles`, which `ChecksummedIpcUpdateInfo` decodes into
vLLM's `ipc_handles`; a pickled payload (`ipc_handles_pickled`) is refused.

Integrity: the learner sends `sent_tensors(..., "vllm_ipc")` (a tied head included, since
vLLM's IPC worker loads exactly what it receives; its handle opens the embedding's memory) and
the checksum of that stream. The worker hashes every tensor vLLM hands to `model.load_weights`,
in order, and compares before loading: a mismatch rejects the version with the model untouched
(vLLM's layerwise reload starts only once the check passes). A version's tensors are that
version's own (native_sender.py snapshots at `publish`), so they cannot change under the engine.

Placement: every sent tensor is on the sender's CUDA device (placement.py `send_device`); the
worker refuses handles from another physical GPU (`ipc_same_gpu`) before opening one.

Bounded waits: nothing here waits on the peer except through the learner's store, whose every
wait has `weights.timeout_s`; opening a handle is a local CUDA call, and the actor bounds each
engine call with `asyncio.wait_for` (native_receiver.py). Memory: torch's IPC reference counts
keep an exported block from reuse while the engine holds it; `torch.cuda.ipc_collect()` after
each version returns what the engine released. Needs CUDA: not exercised on the CPU machines
(tests/gpu/test_ipc.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

import torch
from torch.multiprocessing.reductions import reduce_tensor
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
)
from vllm.distributed.weight_transfer.ipc_engine import (
    IPCWeightTransferEngine,
    IPCWeightTransferInitInfo,
    IPCWeightTransferUpdateInfo,
)

# At import (when the worker builds the engine), not at the first update: this import takes
# seconds and would eat into that update's timeout.
from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

from agent_r1_async.weights.ipc_handles import Encoded, decode_handle, encode_handle, gpu_uuid
from agent_r1_async.weights.placement import ipc_same_gpu
from agent_r1_async.weights.seam import ChecksumMismatch, sampled_checksum
from agent_r1_async.weights.vllm_plugin import IPC, WorkerModel

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.weight_transfer import WeightTransferConfig


# ---------------------------------------------------------------------- learner side


@dataclass
class IpcTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = IPC

    device: str = ""
    """The sender's CUDA device, `cuda:N` (every sent tensor lives there); empty: this
    thread's current device."""


Export = Callable[[torch.Tensor], Sequence[object]]
"""A tensor → the arguments that open it in another process (`reduce_tensor(t)[1]`)."""

# torch leaves these two unannotated: typed here once.
_reduce: Callable[[torch.Tensor], tuple[object, Sequence[object]]] = reduce_tensor
_ipc_collect: Callable[[], None] = torch.cuda.ipc_collect


def _cuda_export(t: torch.Tensor) -> Sequence[object]:
    return _reduce(t)[1]


def offer_payload(
    named: Sequence[tuple[str, torch.Tensor]], gpu: str, export: Export | None = None
) -> dict[str, Any]:
    """vLLM's IPC update info for `named` (names, dtype names, shapes) with one handle per
    tensor, `{gpu: encode_handle(export(t))}`, under `encoded_handles` (`export`: torch's
    `reduce_tensor` unless given)."""
    export = export or _cuda_export
    return {
        "names": [n for n, _ in named],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in named],
        "shapes": [list(t.shape) for _, t in named],
        "encoded_handles": [{gpu: encode_handle(export(t))} for _, t in named],
    }


class IpcTrainerWeightTransferEngine(TrainerWeightTransferEngine[IpcTrainerInitInfo]):
    """The learner's side of one pair: exports every tensor of `source` each round."""

    init_info_cls = IpcTrainerInitInfo

    def __init__(
        self, *, client: VLLMWeightSyncClient, source: WeightSource | None = None,
        is_sender: bool = True, device: str = "",
    ) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        index = torch.device(device).index if device else torch.cuda.current_device()
        if index is None:
            raise ValueError(f"weights.backend vllm_ipc sends from cuda:N, not {device!r}")
        self.device = f"cuda:{index}"
        self.gpu = gpu_uuid(index)

    @classmethod
    def trainer_init(
        cls, init_info: IpcTrainerInitInfo, *, client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        if source is None:
            raise ValueError("the IPC trainer engine needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender,
                     device=init_info.device)
        if engine.is_sender:  # one handle per tensor: vLLM's unpacked mode
            client.init_weight_transfer_engine(asdict(IPCWeightTransferInitInfo(packed=False)))
        return engine

    def _stream(self) -> list[tuple[str, torch.Tensor]]:
        """The source's tensors as sent, each checked against `metadata()` and against the
        sender's device (placement.py put them there)."""
        assert self.source is not None
        named = []
        for (name, t), m in zip(self.source, self.source.metadata(), strict=True):
            if name != m.name or tuple(t.shape) != m.shape or t.dtype != m.dtype:
                raise ValueError(f"WeightSource yielded {name!r} where metadata() says {m.name!r}")
            if str(t.device) != self.device:
                raise ValueError(f"weights.backend vllm_ipc exports tensors on {self.device}; "
                                 f"{name!r} is on {t.device}")
            if not t.is_contiguous():
                raise ValueError(f"weights.backend vllm_ipc exports contiguous tensors; "
                                 f"{name!r} is not")
            named.append((name, t.detach()))
        return named

    def send_weights(self) -> None:
        if not self.is_sender:
            return
        payload = offer_payload(self._stream(), self.gpu)
        try:
            self.client.start_weight_update()
            self.client.update_weights(payload)
            self.client.finish_weight_update()  # the actor's ack: it has loaded (or failed)
        finally:
            # The tensors stay alive in the sender's snapshot until the next version; this
            # returns the blocks of older versions the engine has released since.
            _ipc_collect()


# ---------------------------------------------------------------------- engine side


@dataclass
class ChecksummedIpcUpdateInfo(IPCWeightTransferUpdateInfo):
    encoded_handles: list[dict[str, Encoded]] | None = None
    """One `{gpu uuid: encode_handle(...)}` per tensor (ipc_handles.py), decoded into
    `ipc_handles`."""
    version: int = -1
    checksum: str = ""
    """`sampled_checksum` of the stream the learner sends (`sent_tensors`); empty = not
    checked."""

    def __post_init__(self) -> None:
        if self.ipc_handles_pickled is not None:
            raise ValueError("weights.backend vllm_ipc: pickled IPC handles are refused; "
                             "handles travel as JSON values (encoded_handles)")
        if self.encoded_handles is not None:
            if self.ipc_handles is not None:
                raise ValueError("give ipc_handles or encoded_handles, not both")
            self.ipc_handles = [
                {gpu: decode_handle(h) for gpu, h in per.items()} for per in self.encoded_handles
            ]
            self.encoded_handles = None
        super().__post_init__()  # type: ignore[no-untyped-call]  # vLLM's checks


class ChecksummedIpcWeightTransferEngine(IPCWeightTransferEngine):
    update_info_cls = ChecksummedIpcUpdateInfo

    def __init__(
        self, config: WeightTransferConfig, vllm_config: VllmConfig, device: torch.device,
        model: torch.nn.Module,
    ) -> None:
        super().__init__(config, vllm_config, device, model)
        self._loaded = False

    def init_transfer_engine(self, init_info: IPCWeightTransferInitInfo) -> None:
        if init_info.packed:
            raise ValueError("weights.backend vllm_ipc: the learner sends one handle per tensor "
                             "(packed=False)")
        super().init_transfer_engine(init_info)

    def start_weight_update(self) -> None:
        self._loaded = False  # the layerwise reload starts once the tensors pass the checksum

    # The base class takes its own update info; vLLM builds ours from `update_info_cls`.
    def receive_weights(  # type: ignore[override]
        self, update_info: ChecksummedIpcUpdateInfo
    ) -> None:
        """vLLM's receive (open each handle on this worker's device, load), after checking
        that every handle is of this worker's GPU, with `sampled_checksum` of the tensors
        handed to `model.load_weights` checked before they are loaded."""
        self._check_same_gpu(update_info.ipc_handles)
        model = cast(WorkerModel, self.model)
        load = model.load_weights
        checked = False

        def verified_load(weights: Iterable[tuple[str, torch.Tensor]]) -> Any:
            nonlocal checked
            weights = list(weights)
            self._verify(update_info, weights)
            checked = True
            self._start_reload()
            return load(weights)

        model.load_weights = verified_load
        try:
            super().receive_weights(update_info)
        finally:
            del model.load_weights  # back to the class's method
        if not checked:  # vLLM loaded nothing: the stream was empty
            self._verify(update_info, [])

    def _check_same_gpu(self, handles: object) -> None:
        if not isinstance(handles, list):
            raise ValueError("weights.backend vllm_ipc: expected one handle per tensor")
        own = gpu_uuid(self.device.index if self.device.index is not None else 0)
        for per in handles:
            if own not in per:
                ipc_same_gpu(next(iter(per), ""), own)

    @staticmethod
    def _verify(update_info: ChecksummedIpcUpdateInfo,
                weights: list[tuple[str, torch.Tensor]]) -> None:
        got = sampled_checksum(weights)
        if update_info.checksum and got != update_info.checksum:
            raise ChecksumMismatch(
                f"weights v{update_info.version}: checksum mismatch (learner "
                f"{update_info.checksum}, received {got}); version rejected, model unchanged"
            )

    def _start_reload(self) -> None:
        initialize_layerwise_reload(self.model)
        self._loaded = True

    def finish_weight_update(self) -> None:
        if self._loaded:
            super().finish_weight_update()
            self._loaded = False

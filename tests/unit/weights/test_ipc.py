"""Our CUDA IPC weight-transfer engines (weights/ipc.py) on a machine without a GPU.

vLLM's own IPC receive runs unchanged, with two stand-ins for what needs a GPU: the GPU UUIDs
(`torch.cuda.get_device_properties`) are injected, and a handle is the index of the sender's
tensor, so "opening" it (`rebuild_cuda_tensor` in vLLM's ipc_engine) gives that very tensor,
as opening a real handle gives the sender's memory. The layerwise reload is recorded, not
run (there is no vLLM model). The offers travel through the real `StorePairClient` over an
in-memory torch store, as JSON. tests/gpu/test_ipc.py runs the real handles across two
processes on a GPU.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.setup_needs import require_module

require_module("vllm")
pytestmark = pytest.mark.vllm

from vllm.distributed.weight_transfer import ipc_engine  # noqa: E402
from vllm.model_executor.model_loader import reload  # noqa: E402

from agent_r1_async.weights import ipc  # noqa: E402
from agent_r1_async.weights.native_sender import SnapshotSource, prepare  # noqa: E402
from agent_r1_async.weights.rendezvous import StorePairClient, wait_get  # noqa: E402
from agent_r1_async.weights.seam import (  # noqa: E402
    EMBEDDING,
    TIED_HEAD,
    ChecksumMismatch,
    sampled_checksum,
)

GPU_A, GPU_B = "GPU-aaaa-0001", "GPU-bbbb-0002"
UP, NORM = "model.layers.0.mlp.up_proj.weight", "model.norm.weight"
PREFIX = "tok/pair/1"


def _tied() -> dict[str, torch.Tensor]:
    """As the learner publishes a tied model: the head is the embedding, published once."""
    g = torch.Generator().manual_seed(0)
    return {EMBEDDING: torch.randn(32, 8, generator=g), UP: torch.randn(16, 8, generator=g),
            NORM: torch.ones(8, dtype=torch.bfloat16)}


def _untied() -> dict[str, torch.Tensor]:
    return {**_tied(), TIED_HEAD: torch.randn(32, 8, generator=torch.Generator().manual_seed(1))}


class _Handles:
    """Export / open stand-ins: a handle is the exported tensor's index (4 bytes)."""

    def __init__(self) -> None:
        self.exported: list[torch.Tensor] = []
        self.opened = 0

    def export(self, t: torch.Tensor) -> tuple[object, ...]:
        self.exported.append(t)
        handle = (len(self.exported) - 1).to_bytes(4, "big")
        return (torch.Tensor, t.shape, t.stride(), 0, torch.storage.TypedStorage, t.dtype, 0,
                handle, t.numel() * t.element_size(), 0, False, b"rc", 0, b"ev", True)

    def open(self, *args: Any) -> torch.Tensor:
        assert len(args) == 15 and args[6] == 0  # vLLM sets the worker's device index
        self.opened += 1
        return self.exported[int.from_bytes(args[7], "big")]


class _Model:
    """A vLLM model as far as the worker goes: `load_weights`, a method of the class."""

    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}
        self.calls = 0

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.calls += 1
        for name, t in weights:
            self.loaded[name] = t.clone()


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The worker's GPU is GPU_A; handles open through `_Handles`; reloads are recorded."""
    handles, reloads = _Handles(), {"initialize": 0, "finalize": 0}
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(uuid=GPU_A))
    monkeypatch.setattr(ipc_engine, "rebuild_cuda_tensor", handles.open)

    def initialize(model: object) -> None:
        reloads["initialize"] += 1

    def finalize(model: object, model_config: object) -> None:
        reloads["finalize"] += 1

    monkeypatch.setattr(ipc, "initialize_layerwise_reload", initialize)
    monkeypatch.setattr(reload, "finalize_layerwise_reload", finalize)
    return SimpleNamespace(handles=handles, reloads=reloads)


def _worker(model: _Model) -> ipc.ChecksummedIpcWeightTransferEngine:
    worker = ipc.ChecksummedIpcWeightTransferEngine(
        None, SimpleNamespace(parallel_config=None, model_config=None), torch.device("cuda:0"),
        model)
    worker.init_transfer_engine(worker.parse_init_info({"packed": False}))
    return worker


def _offer(gpu: SimpleNamespace, stream: list[tuple[str, torch.Tensor]], checksum: str,
           sender_gpu: str = GPU_A) -> dict[str, Any]:
    """The update info as the actor reads it: the learner's payload, posted by its pair client
    (version and checksum added) into the store as JSON, read back."""
    store = dist.HashStore()
    client = StorePairClient(store, PREFIX, "actor-0", 5.0)
    client.stage(3, checksum, 0.0)
    client.update_weights(ipc.offer_payload(stream, sender_gpu, gpu.handles.export))
    offer: dict[str, Any] = json.loads(store.get(f"{PREFIX}/offer/1"))
    return offer["update_info"]


def _receive(worker: ipc.ChecksummedIpcWeightTransferEngine, info: dict[str, Any]) -> None:
    """One version as vLLM's worker runs it (less the device synchronize of `update_weights`)."""
    worker.start_weight_update()
    worker.receive_weights(worker.parse_update_info(info))
    worker.finish_weight_update()


@pytest.mark.parametrize("state", [_tied, _untied], ids=["tied", "untied"])
def test_the_engine_loads_the_learners_tensors_once_the_checksum_passes(
    gpu: SimpleNamespace, state: Any
) -> None:
    sd = state()
    stream, checksum = prepare(sd, "vllm_ipc")
    assert [n for n, _ in stream] == [EMBEDDING, UP, NORM, TIED_HEAD]  # the head is sent
    model = _Model()
    _receive(_worker(model), _offer(gpu, stream, checksum))
    assert model.calls == 1 and list(model.loaded) == [EMBEDDING, UP, NORM, TIED_HEAD]
    head = sd[EMBEDDING] if state is _tied else sd[TIED_HEAD]
    for name, t in {**sd, TIED_HEAD: head}.items():
        assert model.loaded[name].dtype == t.dtype and torch.equal(model.loaded[name], t)
    assert gpu.handles.opened == 4
    assert gpu.reloads == {"initialize": 1, "finalize": 1}


def test_the_offer_crosses_vllms_engine_core_rpc_unchanged(gpu: SimpleNamespace) -> None:
    """`VllmEngine.receive_weights` hands the update info to `AsyncLLM.update_weights`, whose
    `collective_rpc` carries it to the worker with vLLM's msgpack: plain JSON values (no
    tensors, classes or bytes) cross it unchanged and still open and load."""
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    stream, checksum = prepare(_tied(), "vllm_ipc")
    info = _offer(gpu, stream, checksum)
    method, _, kwargs = MsgpackDecoder().decode(
        MsgpackEncoder().encode(("update_weights", (), {"update_info": info})))
    assert method == "update_weights" and kwargs["update_info"] == info
    model = _Model()
    _receive(_worker(model), kwargs["update_info"])
    assert list(model.loaded) == [EMBEDDING, UP, NORM, TIED_HEAD]


def test_a_checksum_mismatch_rejects_the_version_with_the_model_untouched(
    gpu: SimpleNamespace,
) -> None:
    stream, checksum = prepare(_tied(), "vllm_ipc")
    wrong = sampled_checksum(_tied().items())  # the published dict, without the sent head
    assert wrong != checksum
    model = _Model()
    worker = _worker(model)
    worker.start_weight_update()
    with pytest.raises(ChecksumMismatch) as info:
        worker.receive_weights(worker.parse_update_info(_offer(gpu, stream, wrong)))
    assert str(info.value) == (f"weights v3: checksum mismatch (learner {wrong}, received "
                               f"{checksum}); version rejected, model unchanged")
    worker.finish_weight_update()
    assert (model.calls, model.loaded) == (0, {})
    assert gpu.reloads == {"initialize": 0, "finalize": 0}  # the reload never started
    _receive(worker, _offer(gpu, stream, checksum))  # the next version passes
    assert list(model.loaded) == [EMBEDDING, UP, NORM, TIED_HEAD]


def test_handles_of_another_gpu_are_refused_before_any_is_opened(gpu: SimpleNamespace) -> None:
    stream, checksum = prepare(_tied(), "vllm_ipc")
    model = _Model()
    worker = _worker(model)
    worker.start_weight_update()
    with pytest.raises(ValueError) as info:
        worker.receive_weights(worker.parse_update_info(_offer(gpu, stream, checksum, GPU_B)))
    assert str(info.value) == (
        f"weights.backend vllm_ipc: the learner's tensors are on GPU {GPU_B} and this engine on "
        f"GPU {GPU_A}; CUDA IPC opens memory of the same physical GPU only: put the learner and "
        "the engine on one GPU, or use weights.backend vllm_nccl across GPUs")
    assert gpu.handles.opened == 0 and model.calls == 0


def test_pickled_handles_are_refused_even_where_vllm_would_unpickle(
    gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    worker = _worker(_Model())
    info = {"names": ["w"], "dtype_names": ["float32"], "shapes": [[1]],
            "ipc_handles_pickled": "gASVAgAAAAAAAABdlC4="}  # pickle of []
    with pytest.raises(ValueError) as err:
        worker.parse_update_info(info)
    assert str(err.value) == ("weights.backend vllm_ipc: pickled IPC handles are refused; "
                              "handles travel as JSON values (encoded_handles)")


def test_a_packed_transfer_is_refused_at_join(gpu: SimpleNamespace) -> None:
    worker = ipc.ChecksummedIpcWeightTransferEngine(
        None, SimpleNamespace(parallel_config=None, model_config=None), torch.device("cuda:0"),
        _Model())
    with pytest.raises(ValueError, match=r"^weights.backend vllm_ipc: the learner sends one "
                       r"handle per tensor \(packed=False\)$"):
        worker.init_transfer_engine(worker.parse_init_info({"packed": True}))


# ---------------------------------------------------------------------- the learner's side


class _Recording:
    """A `VLLMWeightSyncClient` that records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.calls.append(("init", init_info))

    def start_weight_update(self) -> None:
        self.calls.append(("start", None))

    def update_weights(self, update_info: Any) -> None:
        self.calls.append(("update", update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.calls.append(("finish", None))


def _trainer(client: Any, stream: list[tuple[str, torch.Tensor]]) -> Any:
    source = SnapshotSource()
    source.set(stream)
    return ipc.IpcTrainerWeightTransferEngine.trainer_init(
        ipc.IpcTrainerInitInfo(rank=0, device="cuda:0"), client=client, source=source)


def test_the_trainer_joins_unpacked_and_refuses_a_tensor_off_its_device(
    gpu: SimpleNamespace,
) -> None:
    client = _Recording()
    trainer = _trainer(client, [(UP, torch.ones(2, 2))])
    assert (trainer.device, trainer.gpu) == ("cuda:0", GPU_A)
    assert client.calls == [("init", {"packed": False})]
    with pytest.raises(ValueError) as info:
        trainer.send_weights()
    assert str(info.value) == f"weights.backend vllm_ipc exports tensors on cuda:0; '{UP}' is on cpu"
    assert client.calls == [("init", {"packed": False})]  # nothing offered


def test_one_version_from_the_trainer_through_the_store_into_the_engine(
    gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learner's pair (our trainer engine + StorePairClient) against an actor thread that
    does what NativeWeightReceiver and the vLLM engine do with an offer: receive, acknowledge."""
    monkeypatch.setattr(ipc, "_cuda_export", gpu.handles.export)
    collected = []
    monkeypatch.setattr(ipc, "_ipc_collect", lambda: collected.append(1))
    sd = _tied()
    stream, checksum = prepare(sd, "vllm_ipc")
    store = dist.HashStore()
    client = StorePairClient(store, PREFIX, "actor-0", 5.0)
    store.set(f"{PREFIX}/init_ack", "ok")  # the actor has joined
    trainer = _trainer(client, stream)
    trainer.device = "cpu"  # the stand-in handles export CPU tensors
    model = _Model()
    worker = _worker(model)

    def actor() -> None:
        offer = json.loads(wait_get(store, f"{PREFIX}/offer/1", 5.0, "no offer"))
        _receive(worker, offer["update_info"])
        store.set(f"{PREFIX}/ack/1", json.dumps(
            {"ok": True, "version": offer["version"], "checksum": offer["checksum"]}))

    thread = threading.Thread(target=actor)
    thread.start()
    client.stage(7, checksum, 0.0)
    trainer.send_weights()  # returns once the ack (with the staged checksum) is in
    thread.join(5)
    assert client.last_ack == {"ok": True, "version": 7, "checksum": checksum}
    assert list(model.loaded) == [EMBEDDING, UP, NORM, TIED_HEAD]
    assert torch.equal(model.loaded[TIED_HEAD], sd[EMBEDDING])
    exported = gpu.handles.exported  # the head's handle: the embedding's own memory
    assert exported[3].data_ptr() == exported[0].data_ptr() == sd[EMBEDDING].data_ptr()
    assert collected == [1]

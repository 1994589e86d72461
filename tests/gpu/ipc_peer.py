"""The engine side of tests/gpu/test_ipc.py, in a process of its own: a CUDA IPC handle opens
only in another process than the one that exported it.

    python tests/gpu/ipc_peer.py open < offer.json
        torch only: open every handle of the offer ({"names", "handles"}: `encode_handle`
        values) on cuda:0, hash what opened.
    python tests/gpu/ipc_peer.py engine ENDPOINT VERSIONS DTYPE
        our vLLM IPC worker engine (weights/ipc.py: vLLM's IPCWeightTransferEngine with our
        checks) behind a `NativeWeightReceiver`, joined to the learner at ENDPOINT, until it
        serves version VERSIONS; DTYPE is the dtype it asks the learner for.

Each result is one line `RESULT {json}`: this process's GPU UUID, then per opened set of tensors
their names, dtypes, `sampled_checksum` and a blake2b digest of every byte, in order.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

import torch


def _digest(named: list[tuple[str, torch.Tensor]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, t in named:
        h.update(name.encode())
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def describe(named: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """What both processes compare: names, dtypes, the shared checksum, every byte's digest."""
    from agent_r1_async.weights.seam import sampled_checksum

    return {"names": [n for n, _ in named],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in named],
            "checksum": sampled_checksum(named), "digest": _digest(named)}


def _report(body: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(body), flush=True)


def open_handles() -> None:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    from agent_r1_async.weights.ipc_handles import decode_handle, gpu_uuid

    torch.cuda.set_device(0)
    offer = json.load(sys.stdin)
    named = [(name, rebuild_cuda_tensor(*decode_handle(h)))
             for name, h in zip(offer["names"], offer["handles"], strict=True)]
    torch.cuda.synchronize()
    _report({"gpu": gpu_uuid(0), **describe(named)})


def _recording_worker() -> Any:
    """Our worker engine, its load into a vLLM model replaced by a record (a GPU copy of each
    tensor, its own memory) and, with no vLLM model, no layerwise reload."""
    from agent_r1_async.weights.ipc import ChecksummedIpcWeightTransferEngine

    class Model:
        def __init__(self) -> None:
            self.loaded: list[tuple[str, torch.Tensor]] = []

        def load_weights(self, weights: Any) -> None:
            self.loaded = [(n, t.detach().clone()) for n, t in weights]

    class RecordingIpcEngine(ChecksummedIpcWeightTransferEngine):
        def _start_reload(self) -> None:
            self._loaded = True

        def finish_weight_update(self) -> None:
            self._loaded = False

    return RecordingIpcEngine(None, SimpleNamespace(parallel_config=None, model_config=None),
                              torch.device("cuda:0"), Model())


class Engine:
    """What `VllmEngine` does around its worker for the native backends (join, receive under
    start / update / finish, leave), the worker in this process."""

    def __init__(self) -> None:
        self.worker = _recording_worker()
        self.version = 0

    async def join_weight_transfer(self, init_info: dict[str, Any]) -> None:
        w = self.worker
        await asyncio.to_thread(w.init_transfer_engine, w.parse_init_info(init_info))

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        raise AssertionError("a native weight receiver loaded a whole state dict")

    async def receive_weights(self, version: int, update_info: dict[str, Any]) -> None:
        def run() -> None:
            self.worker.start_weight_update()
            self.worker.update_weights(update_info)  # vLLM's: parse, receive, synchronize
            self.worker.finish_weight_update()

        await asyncio.to_thread(run)
        self.version = version

    async def leave_weight_transfer(self) -> None:
        self.worker.shutdown()


def engine(endpoint: str, versions: int, dtype: str) -> None:
    from agent_r1_async.weights.ipc_handles import gpu_uuid
    from agent_r1_async.weights.native_receiver import NativeWeightReceiver

    torch.cuda.set_device(0)
    eng = Engine()
    receiver = NativeWeightReceiver(endpoint, "actor-0", 30.0, dtype=dtype)
    _report({"gpu": gpu_uuid(0)})

    async def pump() -> None:
        deadline = time.monotonic() + 150
        while eng.version < versions and time.monotonic() < deadline:
            applied = await receiver.update(eng)
            if applied is not None:
                _report({"version": applied.version, **describe(eng.worker.model.loaded)})
            await asyncio.sleep(0.01)

    asyncio.run(pump())
    _report({"served": eng.version, "failed": receiver.failed, "rejected": receiver.rejected})


if __name__ == "__main__":
    if sys.argv[1] == "open":
        open_handles()
    else:
        engine(sys.argv[2], int(sys.argv[3]), sys.argv[4])

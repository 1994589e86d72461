"""vLLM plugin: registers our weight-transfer engines in vLLM's factories.

Declared as a `vllm.general_plugins` entry point in pyproject.toml; vLLM calls `register()`
in every process it starts (the API process, the engine core, each worker), which is the only
way code of ours reaches the worker that holds the model. Registration is by module path, so
nothing heavy is imported until an engine of ours is configured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

GLOO = "agent_r1_gloo"
"""Worker + trainer engine: torch.distributed gloo, CPU (weights.backend: vllm_gloo)."""
NCCL = "agent_r1_nccl"
"""Worker engine: vLLM's NCCL engine plus our checksum check (weights.backend: vllm_nccl)."""
IPC = "agent_r1_ipc"
"""Worker engine: vLLM's CUDA IPC engine plus our same-GPU and checksum checks; trainer engine:
ours, JSON handles and no process group (weights.backend: vllm_ipc)."""

ENGINE_FOR_BACKEND = {"vllm_gloo": GLOO, "vllm_nccl": NCCL, "vllm_ipc": IPC}
"""weights.backend → the vLLM worker engine it configures (zmq: none)."""


class WorkerModel(Protocol):
    """The model a vLLM worker engine loads into: every vLLM model defines `load_weights`,
    which `torch.nn.Module` (the type vLLM's engines declare) does not."""

    load_weights: Callable[[Iterable[tuple[str, torch.Tensor]]], Any]


def register() -> None:
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )

    # register() runs once per process in vLLM, but tests and the learner may call it again.
    if GLOO not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            GLOO, "agent_r1_async.weights.gloo", "GlooWeightTransferEngine"
        )
    if GLOO not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(
            GLOO, "agent_r1_async.weights.gloo", "GlooTrainerWeightTransferEngine"
        )
    if NCCL not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            NCCL, "agent_r1_async.weights.nccl", "ChecksummedNCCLWeightTransferEngine"
        )
    if IPC not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            IPC, "agent_r1_async.weights.ipc", "ChecksummedIpcWeightTransferEngine"
        )
    if IPC not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(
            IPC, "agent_r1_async.weights.ipc", "IpcTrainerWeightTransferEngine"
        )

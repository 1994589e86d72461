"""vLLM's NCCL weight-transfer engine plus our integrity check (weights.backend: vllm_nccl).

The transport is vLLM's own (`NCCLWeightTransferEngine`, and on the learner vLLM's
`NCCLTrainerWeightTransferEngine` unchanged); this subclass only widens the update info with
the version and the learner's checksum, and hashes each tensor as vLLM hands it to
`model.load_weights`. The learner sends `sent_tensors(..., "vllm_nccl")` (seam.py: a tied
head included, since this worker loads exactly what it receives) and checksums that stream;
the worker hashes every tensor it is handed, in order, so the two sides hash one stream.
NCCL streams into the model, so a mismatch is found after loading: the version is rejected
and counted (the engine keeps its old version label, the actor re-joins and the next version
overwrites the bad bytes). Every tensor arrives on this worker's device; the learner sends
from its own CUDA device (placement.py), never from the CPU.

Bounded waits. vLLM's API gives the worker side no timeout: `PyNcclCommunicator` has none
(NCCL has none of its own), neither the init nor the update info carries one, the rendezvous
uses vLLM's `StatelessProcessGroup` store timeout (300 s) and `ncclCommInitRank` waits for
every rank; a receive blocks in a CUDA synchronize until the learner's rank sends. The only
way out, `ncclCommAbort`, frees the communicator while vLLM's receive loop would go on using
it. What bounds a receive is the caller: the actor wraps every engine call in
`asyncio.wait_for(weights.timeout_s + 10 s)` (native_receiver.py), so its `update` returns,
counted in `failed`. The worker itself stays blocked when the learner dies mid-transfer, and
the engine's `resume_generation` queues behind it: that actor serves no more requests until
it is restarted (on gloo the worker's own timeouts end the receive; see gloo.py).
Needs CUDA: not exercised on the CPU machines (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)

from agent_r1_async.weights.seam import ChecksumMismatch, SampledChecksum
from agent_r1_async.weights.vllm_plugin import WorkerModel


@dataclass
class ChecksummedNCCLUpdateInfo(NCCLWeightTransferUpdateInfo):
    version: int = -1
    checksum: str = ""


class ChecksummedNCCLWeightTransferEngine(NCCLWeightTransferEngine):
    update_info_cls = ChecksummedNCCLUpdateInfo

    # The base class takes its own update info; vLLM builds ours from `update_info_cls`.
    def receive_weights(self, update_info: ChecksummedNCCLUpdateInfo) -> None:  # type: ignore[override]
        """vLLM's receive, with `sampled_checksum` of every tensor handed to
        `model.load_weights` (in order) checked against the learner's; ChecksumMismatch when
        they differ (the bytes are loaded by then)."""
        ck = SampledChecksum()
        model = cast(WorkerModel, self.model)
        load = model.load_weights

        def hashing_load(weights: Iterable[tuple[str, torch.Tensor]]) -> Any:
            weights = list(weights)
            for name, t in weights:
                ck.update(name, t)
            return load(weights)

        model.load_weights = hashing_load
        try:
            super().receive_weights(update_info)
        finally:
            del model.load_weights  # back to the class's method
        if update_info.checksum and ck.hexdigest() != update_info.checksum:
            raise ChecksumMismatch(
                f"weights v{update_info.version}: checksum mismatch (learner "
                f"{update_info.checksum}, received {ck.hexdigest()})"
            )

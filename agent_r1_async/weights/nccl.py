"""vLLM's NCCL weight-transfer engine plus our integrity check (weights.backend: vllm_nccl).

The transport is vLLM's own (`NCCLWeightTransferEngine`, and on the learner vLLM's
`NCCLTrainerWeightTransferEngine` unchanged); this subclass only widens the update info with
the version and the learner's `sampled_checksum`, and hashes each tensor as vLLM hands it to
`model.load_weights`. NCCL streams into the model, so a mismatch is found after loading: the
version is rejected and counted (the engine keeps its old version label, the actor re-joins
and the next version overwrites the bad bytes). NCCL collectives have no timeout of their
own; the actor bounds each call with `weights.timeout_s` and treats a late one as failed.
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

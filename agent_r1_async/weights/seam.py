"""The weight seam: one Protocol per side between the learner's `publish` and the actor's engine.

    learner:  sender = make_weight_sender(cfg, transport)       # backends.py
              sender.publish(version, state_dict)      # returns at once; delivery is async
    actor:    receiver = make_weight_receiver(cfg, transport, sender_endpoint, actor_id)
              applied = await receiver.update(engine)  # every loop turn; None = nothing new

`WeightSender` is the learner's side, `WeightReceiver` the actor's, `WeightTarget` what a
receiver needs of an engine (every engine implements it; `NativeWeightTarget` adds vLLM's
weight-transfer calls). This module is the seam alone (the Protocols, `Applied`, the
checksum); backends.py picks a backend from `weights.backend`, so the backends import the
seam and nothing imports back.

Backends (`weights.backend`), each in its own module:
- `zmq` (zmq.py): the full state dict as one (Curve-authenticated) PUB/SUB message; the
  actor hands it to `engine.load_weights` (vLLM writes a safetensors file and reloads it). Any
  engine, any network, never blocks the learner; the default.
- `vllm_gloo` / `vllm_nccl` (native_sender.py, native_receiver.py, rendezvous.py; the
  engines: gloo.py, nccl.py, registered in vLLM by vllm_plugin.py): vLLM's own
  weight-transfer API (`init_weight_transfer_engine`, `start_weight_update`, `update_weights`,
  `finish_weight_update(weight_version=...)`) over one two-rank group per actor; the learner
  side is a vLLM *trainer* engine (ours on gloo, vLLM's own on NCCL). vLLM engines only.

Integrity (native backends): the learner computes `sampled_checksum` once per version; the
actor's worker computes it again on the bytes it received and rejects the version when they
differ (counted on both sides). It hashes a few slices of every tensor: cheap, and it catches
a wrong tensor, a truncated or shifted stream and a mixed-up version, not every flipped bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch


BACKENDS = ("zmq", "vllm_gloo", "vllm_nccl")
_SLICE_BYTES = 64
_SLICES = 4


class ChecksumMismatch(RuntimeError):
    """The bytes an actor received do not hash to the learner's checksum for that version."""


@dataclass(frozen=True)
class Applied:
    """One version an actor's engine now serves."""

    version: int
    published_at: float
    """`time.time()` of the learner's `publish` (for the publish → serving latency)."""


@runtime_checkable
class WeightTarget(Protocol):
    """What every backend needs of an engine (every engine implements it): the version it
    serves and a whole-state-dict load (the zmq backend's only path)."""

    version: int

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None: ...


@runtime_checkable
class NativeWeightTarget(WeightTarget, Protocol):
    """What the native backends (vllm_gloo, vllm_nccl) also need: vLLM's weight-transfer API
    behind three calls (the vLLM engine implements it)."""

    async def join_weight_transfer(self, init_info: dict[str, Any]) -> None: ...
    async def receive_weights(self, version: int, update_info: dict[str, Any]) -> None: ...
    async def leave_weight_transfer(self) -> None: ...


@runtime_checkable
class WeightSender(Protocol):
    """Learner side. `publish` takes a snapshot and returns; actors get it asynchronously."""

    endpoint: str
    published: int

    def publish(
        self, version: int, state_dict: dict[str, torch.Tensor], copy: bool = True
    ) -> object:
        """Send `version`; `copy=False`: the caller never touches these tensors again."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WeightReceiver(Protocol):
    """Actor side: applies the newest version (if any) to the engine; never raises for a bad
    or failed update (it is counted and logged; the engine keeps serving what it had)."""

    failed: int

    @property
    def rejected(self) -> int:
        """Versions refused (malformed, or failing the checksum); read-only for callers."""
        ...

    async def update(self, engine: WeightTarget) -> Applied | None: ...

    def close(self) -> None: ...


class SampledChecksum:
    """blake2b over each tensor's name, dtype, shape and `_SLICES` slices of `_SLICE_BYTES`
    bytes at fixed relative offsets (start, 1/3, 2/3, end). Order-sensitive; fed one tensor
    at a time so a streaming receiver can hash as tensors arrive."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=16)

    def update(self, name: str, t: torch.Tensor) -> None:
        import torch

        raw = t.detach().reshape(-1).contiguous().view(torch.uint8)
        n = raw.numel()
        self._h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|{n};".encode())
        for start in sorted({0, n // 3, 2 * n // 3, max(0, n - _SLICE_BYTES)}):
            self._h.update(raw[start : start + _SLICE_BYTES].cpu().numpy().tobytes())

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def sampled_checksum(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """`SampledChecksum` of a whole (ordered) state dict."""
    ck = SampledChecksum()
    for name, t in named:
        ck.update(name, t)
    return ck.hexdigest()

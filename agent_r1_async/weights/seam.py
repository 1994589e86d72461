"""The weight seam: one Protocol per side between the learner's `publish` and the actor's engine.

    learner:  sender = make_weight_sender(cfg, transport)       # backends.py
              sender.publish(version, state_dict)      # returns at once; delivery is async
    actor:    receiver = make_weight_receiver(cfg, transport, sender_endpoint, actor_id)
              applied = await receiver.update(engine)  # every loop turn; None = nothing new

`WeightSender` is the learner's side, `WeightReceiver` the actor's, `WeightTarget` what a
receiver needs of an engine (every engine implements it; `NativeWeightTarget` adds vLLM's
weight-transfer calls). This module is the seam alone (the Protocols, `Applied`, the
stream a version travels as and its checksum); backends.py picks a backend from
`weights.backend`, so the backends import the seam and nothing imports back.

Backends (`weights.backend`), each in its own module:
- `zmq` (zmq.py): the full state dict as one (Curve-authenticated) PUB/SUB message; the
  actor hands it to `engine.load_weights` (vLLM writes a safetensors file and reloads it). Any
  engine, any network, never blocks the learner; the default.
- `vllm_gloo` / `vllm_nccl` / `vllm_ipc` (native_sender.py, native_receiver.py,
  rendezvous.py; the engines: gloo.py, nccl.py, ipc.py, registered in vLLM by
  vllm_plugin.py): vLLM's own weight-transfer API (`init_weight_transfer_engine`,
  `start_weight_update`, `update_weights`, `finish_weight_update(weight_version=...)`), one
  pair per actor: a two-rank group on gloo and NCCL, CUDA IPC handles of the learner's
  tensors on one GPU for ipc; the learner side is a vLLM *trainer* engine (ours on gloo and
  ipc, vLLM's own on NCCL). vLLM engines only.

The stream (native backends): what a backend sends for one version is `sent_tensors(
state_dict, backend)`, an ordered list of (name, tensor); the one rule about a tied head lives
there (`TIED_HEAD_ON_WIRE`). The learner publishes a tied `lm_head.weight` once, as the
embedding (`iter_published` drops the duplicate): vllm_gloo leaves it off the wire and its
worker loads the head from the received embedding (`with_tied_head`); vllm_nccl and vllm_ipc
send it, because vLLM's NCCL and IPC workers load exactly the tensors they receive (on ipc the
head's handle opens the embedding's own memory: no second copy is made for it).

Integrity (native backends): the checksum of a version is `sampled_checksum` over that stream,
in its order, computed once by the learner; the actor's worker computes it again over the
tensors it received, in the order received (gloo: every received tensor, before its own
`with_tied_head`; NCCL and IPC: every tensor vLLM hands to `model.load_weights`), and
rejects the version when they differ (counted on both sides). Both sides hash the same
stream, so a tied and an untied model pass alike. It hashes a few slices of every tensor:
cheap, and it catches a wrong tensor, a truncated or shifted stream and a mixed-up version,
not every flipped bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import torch


BACKENDS = ("zmq", "vllm_gloo", "vllm_nccl", "vllm_ipc")
TIED_HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"
TIED_HEAD_ON_WIRE: Mapping[str, bool] = {
    "zmq": False, "vllm_gloo": False, "vllm_nccl": True, "vllm_ipc": True}
"""Whether `backend` sends a tied head as a tensor of its own. zmq: no (the vLLM actor adds it
when it writes the file, `_for_vllm`); vllm_gloo: no (its worker adds it, `with_tied_head`);
vllm_nccl and vllm_ipc: yes (vLLM's NCCL and IPC workers load only what they receive)."""
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
    """What the native backends (vllm_gloo, vllm_nccl, vllm_ipc) also need: vLLM's
    weight-transfer API behind three calls (the vLLM engine implements it)."""

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


def sampled_checksum(stream: Iterable[tuple[str, torch.Tensor]]) -> str:
    """`SampledChecksum` of an ordered stream of (name, tensor): the learner's over
    `sent_tensors`, a worker's over what it received."""
    ck = SampledChecksum()
    for name, t in stream:
        ck.update(name, t)
    return ck.hexdigest()


_T = TypeVar("_T")


def with_tied_head(named: Sequence[tuple[str, _T]]) -> list[tuple[str, _T]]:
    """`named`, plus (`TIED_HEAD`, the embedding) at the end when the head is tied: absent
    while the embedding is present (how the learner publishes a tied head). The head is the
    embedding object itself, not a copy."""
    out = list(named)
    names = {n for n, _ in out}
    if TIED_HEAD not in names and EMBEDDING in names:
        out.append((TIED_HEAD, dict(out)[EMBEDDING]))
    return out


def sent_tensors(
    state_dict: Mapping[str, torch.Tensor], backend: str
) -> list[tuple[str, torch.Tensor]]:
    """The ordered stream `backend` sends for `state_dict`: its items in order, then a tied
    head where `TIED_HEAD_ON_WIRE[backend]`. The checksum of a version is `sampled_checksum`
    of this stream, on both sides; a KeyError names an unknown backend."""
    items = list(state_dict.items())
    return with_tied_head(items) if TIED_HEAD_ON_WIRE[backend] else items

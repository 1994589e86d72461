"""Weight publishing: learner → actors over ZMQ PUB/SUB, one multipart message per version.

Frame 0 is a msgspec `WeightsHeader` (version, publish time, one `TensorMeta` per tensor);
frame i+1 holds the raw bytes of tensor i (C-contiguous, native little-endian). Sending is
zero-copy: each frame is a memoryview of a CPU tensor viewed as uint8 (so bf16, which numpy
lacks, travels as bytes too). `publish` first takes a CPU snapshot of every tensor (the copy
that a GPU → CPU transfer needs anyway; on CPU it keeps the optimizer's next in-place step
from racing libzmq's I/O thread), so the caller may keep training at once.

PUB/SUB keeps at most a couple of messages for a slow subscriber and drops older ones: only
the newest version matters. A subscriber that connects after a publish waits for the next.

The receiver drains everything queued, validates each message (header decodes, schema
matches, one frame per tensor, each frame's size = nbytes = numel × itemsize) and returns
only the newest valid version newer than what it returned before; every invalid message is
counted in `.rejected` and skipped, never raised. Tensors are copied into owned memory.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import numpy as np
import torch

from agent_r1_async.weights.seam import Applied, WeightTarget
from agent_r1_async.wire import messages
from agent_r1_async.wire.transport import Transport

log = logging.getLogger(__name__)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise messages.WireError(f"unknown tensor dtype {name!r}")
    return dtype


def _as_bytes(t: torch.Tensor) -> memoryview:
    """A zero-copy byte view of a contiguous CPU tensor (any dtype, including bf16)."""
    return t.reshape(-1).view(torch.uint8).numpy().data


def snapshot(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, contiguous CPU copies (owned by the caller, safe to send)."""
    return {
        k: v.detach().to("cpu", copy=True).contiguous() for k, v in state_dict.items()
    }


class ZmqWeightSender:
    """Binds a PUB socket; `publish` sends one version as header + tensor frames."""

    def __init__(self, transport: Transport, endpoint: str = "tcp://127.0.0.1:0") -> None:
        self._pub = transport.broadcaster(endpoint)
        self.endpoint: str = self._pub.endpoint
        self.published = 0

    def publish(
        self, version: int, state_dict: dict[str, torch.Tensor], copy: bool = True
    ) -> messages.WeightsHeader:
        """Send `state_dict` as `version`; `copy=False` sends the given CPU tensors in place."""
        started = time.time()
        tensors = snapshot(state_dict) if copy else state_dict
        metas = []
        frames: list[bytes | memoryview] = []
        for name, t in tensors.items():
            if t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError(f"tensor {name!r}: copy=False needs contiguous CPU tensors")
            metas.append(messages.TensorMeta(
                name=name, dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape),
                nbytes=t.numel() * t.element_size(),
            ))
            frames.append(_as_bytes(t))
        header = messages.WeightsHeader(
            schema_version=messages.SCHEMA_VERSION, version=version, tensors=metas,
            published_at=started,
        )
        self._pub.publish([messages.encode(header), *frames])
        self.published += 1
        return header

    def close(self) -> None:
        self._pub.close()


def decode_weights(
    frames: Sequence[memoryview | bytes],
) -> tuple[messages.WeightsHeader, dict[str, torch.Tensor]]:
    """One multipart message → (header, owned tensors); raises `WireError` when malformed."""
    if not frames:
        raise messages.WireError("empty weights message")
    header = messages.decode_weights_header(frames[0])
    if len(frames) != len(header.tensors) + 1:
        raise messages.WireError(
            f"weights v{header.version}: header lists {len(header.tensors)} tensors, "
            f"got {len(frames) - 1} frames"
        )
    out: dict[str, torch.Tensor] = {}
    for meta, frame in zip(header.tensors, frames[1:], strict=True):
        if meta.name in out:  # a second tensor of the same name would silently replace the first
            raise messages.WireError(f"weights v{header.version}: tensor {meta.name!r} listed twice")
        dtype = _dtype(meta.dtype)
        size = memoryview(frame).nbytes
        itemsize = torch.empty((), dtype=dtype).element_size()
        if any(d < 0 for d in meta.shape) or size != meta.nbytes or (
            meta.nbytes != math.prod(meta.shape) * itemsize
        ):
            raise messages.WireError(
                f"weights v{header.version} tensor {meta.name!r}: frame has {size} bytes, "
                f"header says {meta.nbytes}, shape {meta.shape} × {itemsize} B"
            )
        owned = torch.empty(size, dtype=torch.uint8)
        if size:  # one copy out of the ZMQ frame into memory the caller owns
            owned.numpy()[:] = np.frombuffer(frame, dtype=np.uint8)
        out[meta.name] = owned.view(dtype).reshape(meta.shape)
    return header, out


class WeightSubscriber:
    """Connects a SUB socket; `poll` returns the newest complete version, or None."""

    def __init__(self, transport: Transport, endpoint: str) -> None:
        self._sub = transport.subscriber(endpoint)
        self.endpoint = endpoint
        self.rejected = 0
        self.received = 0
        self.version = -1
        """Newest version returned so far (-1 before the first)."""
        self.last_error = ""

    def poll(
        self, timeout_ms: int = 0
    ) -> tuple[messages.WeightsHeader, dict[str, torch.Tensor]] | None:
        newest = None
        frames = self._sub.recv(timeout_ms)
        while frames is not None:
            try:
                header, tensors = decode_weights(frames)
            except messages.WireError as e:
                self.rejected += 1
                self.last_error = str(e)
            else:
                self.received += 1
                if header.version > self.version and (
                    newest is None or header.version > newest[0].version
                ):
                    newest = (header, tensors)
            frames = self._sub.recv(0)
        if newest is not None:
            self.version = newest[0].version
        return newest

    def close(self) -> None:
        self._sub.close()


class ZmqWeightReceiver:
    """`WeightReceiver` over a `WeightSubscriber`: the newest version goes to `engine.load_weights`
    (weights.backend: zmq). A failed load is counted and logged; the engine keeps its weights."""

    def __init__(self, transport: Transport, endpoint: str, actor_id: str = "") -> None:
        self._rx = WeightSubscriber(transport, endpoint)
        self.actor_id = actor_id
        self.failed = 0

    @property
    def rejected(self) -> int:
        return self._rx.rejected

    async def update(self, engine: WeightTarget) -> Applied | None:
        got = self._rx.poll(0)
        if got is None:
            return None
        header, state_dict = got
        if not isinstance(engine, WeightTarget):
            raise TypeError(f"{type(engine).__name__} cannot load weights (no version, "
                            "no load_weights): not an engine")
        if header.version <= engine.version:
            return None
        try:
            await engine.load_weights(header.version, state_dict)
        except Exception as e:  # a bad weight set must not kill the actor; keep serving
            self.failed += 1
            log.error("%s: loading weights v%d failed: %s", self.actor_id, header.version, e)
            return None
        return Applied(header.version, header.published_at)

    def close(self) -> None:
        self._rx.close()

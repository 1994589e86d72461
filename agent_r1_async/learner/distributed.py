"""The learner's process group: setup/teardown, collectives on small values, row balancing.

`learner.world_size` ranks train one model sharded with FSDP2 (trainer.py). They meet through
torch.distributed's TCP rendezvous at rank 0's address and a free port (`run/` hands it to
every rank). With no process group initialized everything here is the identity: rank 0 of 1,
sums are local sums, a broadcast returns its argument. That is the world_size 1 path, not a
second implementation: the trainer and the loop call these functions either way.

Data flow (see loop.py): rank 0 alone samples from the buffer and broadcasts the batch. The
buffer hands out each group at most once and counts the learner's draws (the data cursor a
checkpoint stores); N ranks sampling independently would each need their own credit and
reuse accounting and could not guarantee group-relative advantages see whole groups. The
broadcast costs one encoded batch per update, msgspec MessagePack with a typed decoder like every
other wire message: 64 episodes × 4 steps (225k tokens of contexts + actions) took 12 ms to
reach rank 1 as a 0.94 MB Python-serialized object (gloo, loopback, 2-core box), and the packed
msgspec encoding is smaller. Negligible next to the forward/backward over those tokens. Every rank then builds the same rows (advantages need whole
groups), and takes the sequences `balance` assigns it.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import msgspec
import torch
import torch.distributed as dist

from agent_r1_async.wire.messages import dec_hook, enc_hook

_T = TypeVar("_T")


def resolve_backend(backend: str, device: torch.device) -> str:
    """`learner.backend`: auto → nccl on CUDA, gloo on CPU."""
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    return backend


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def init_group(rank: int, world_size: int, master_addr: str, master_port: int, backend: str,
               timeout_s: float = 1800.0) -> None:
    """Join the learner's process group (blocks until all `world_size` ranks have joined)."""
    if backend == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    dist.init_process_group(
        backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
        world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s),
    )


def destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    """Is there a process group (then the trainer shards the model with FSDP2)?"""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def barrier() -> None:
    if active():
        dist.barrier()


def broadcast(obj: _T | None, type_: Any, src: int = 0) -> _T:
    """Rank `src`'s `obj` on every rank, decoded as `type_`; the identity without a process
    group. msgspec-encoded (length, then bytes), never pickled: what crosses the ranks' sockets
    is typed data, like every other message of the system."""
    if not active():
        return cast(_T, obj)
    dev = _comm_device()
    mine = rank() == src
    data = msgspec.msgpack.encode(obj, enc_hook=enc_hook) if mine else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=dev)
    dist.broadcast(size, src=src)
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev) if mine
           else torch.empty(int(size.item()), dtype=torch.uint8, device=dev))
    dist.broadcast(buf, src=src)
    if mine:
        return cast(_T, obj)
    return msgspec.msgpack.decode(buf.cpu().numpy().tobytes(), type=type_, dec_hook=dec_hook)


def all_reduce(values: Sequence[float], op: str = "sum") -> list[float]:
    """Element-wise sum (or max) of `values` over the ranks, in float64."""
    if not active():
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.cpu().tolist()


def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def balance(tokens: Sequence[int], ranks: int) -> list[list[int]]:
    """Indices of `tokens` (one count per training sequence) split into `ranks` lists with
    near-equal token sums: longest first, each to the least-loaded rank (LPT; ties to the lower
    rank, so every rank computes the same split). Each list keeps ascending index order.

    Example: tokens [9, 7, 4, 3, 1], 2 ranks: 9→r0; 7→r1; 4→r1 (load 7 < 9); 3→r0 (9 < 11);
    1→r1 (11 < 12): loads 12 and 12, where splitting by row count (3 + 2) would give 20 / 4.
    """
    if ranks < 1:
        raise ValueError(f"balance: ranks must be >= 1, got {ranks}")
    loads = [0] * ranks
    out: list[list[int]] = [[] for _ in range(ranks)]
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        r = min(range(ranks), key=lambda r: (loads[r], r))
        loads[r] += tokens[i]
        out[r].append(i)
    return [sorted(ix) for ix in out]

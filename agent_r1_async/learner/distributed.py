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
broadcast costs one pickled batch per update: measured, 64 episodes × 4 steps (225k tokens of
contexts + actions) pickle to 0.94 MB and reach rank 1 in 12 ms (gloo, loopback, 2-core box),
negligible next to the forward/backward over those tokens. Every rank then builds the same rows (advantages need whole
groups), and takes the sequences `balance` assigns it.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist


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


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank `src`'s `obj` on every rank (pickled); the identity without a process group."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


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

"""The learner's memory: which activations a checkpointed layer keeps, and the malloc heap.

Activations. A decoder layer keeps, for backward, its matmul inputs and every elementwise
intermediate too (RMSNorm's input and normalised output, SiLU's input and output, the
gate × up product, ...). Full activation checkpointing keeps only each layer's input and
re-runs the whole layer in backward: one more forward of compute. `save_matmul_outputs` is
the selective variant (`learner.checkpoint_recompute: pointwise`): the outputs of the matmuls
and of attention are kept (q, k, v, attention, o_proj, gate, up, down), and only the
elementwise ops between them are recomputed in backward.

The heap. The learner allocates and frees a few GB of activations per micro-batch, in tensors
of 1-32 MB that glibc serves from its arenas (its mmap threshold rises to 32 MB after the
first large free), and freed arena memory stays resident. Under Ray the updates run on
whichever thread of the actor's pool is free, each thread with its own arena, so every thread
ends up holding its own copy of the peak. The learner therefore runs on one thread
(run/processes/learner_group.py), and `release_free_memory` (malloc_trim) returns what the arenas hold
after each update; glibc still keeps some memory above the live set at the peak.
`configure_malloc` pins the mmap threshold (every allocation of `mmap_threshold` bytes or
more its own mapping, given back on free): peak = the live set, for the CPU time of its page
faults. jemalloc (`learner.allocator`, the copy Ray ships, preloaded into the learner process
by the launcher: `allocator_env`) with purging off packs the same allocations tighter for
little CPU, and `release_free_memory` purges it at the end of each update (shapes change
between updates). BENCHMARKS.md, "Learner memory", measures these: the activations per
token, the RSS with one thread and with two, the CPU cost of the mmap threshold and of
jemalloc, jemalloc's peak, and the two recompute modes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import logging
from pathlib import Path
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

log = logging.getLogger(__name__)

_aten = torch.ops.aten
_SAVED_OPS = {
    _aten.mm.default,
    _aten.addmm.default,
    _aten.bmm.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
    _aten._scaled_dot_product_flash_attention.default,
    _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_cudnn_attention.default,
    _aten._flash_attention_forward.default,
    _aten._efficient_attention_forward.default,
}
"""Ops whose outputs a checkpointed layer keeps (`save_matmul_outputs`): the matmuls (a
Linear is mm / addmm after a view) and the fused attention kernels."""


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


save_matmul_outputs = functools.partial(create_selective_checkpoint_contexts, _policy)
"""`context_fn` of torch.utils.checkpoint (non-reentrant): keep matmul / attention outputs,
recompute the elementwise ops in backward."""

_M_MMAP_THRESHOLD = -3  # glibc malloc.h
_libc: Any = None


def _glibc() -> Any:
    """glibc's malloc interface, or None (another libc: nothing to tune)."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else False
        except OSError:
            _libc = False
    return _libc or None


def configure_malloc(mmap_threshold: int) -> bool:
    """Serve allocations of at least `mmap_threshold` bytes (> 0) by mmap, returned to the
    system on free (glibc's default threshold adapts upwards to 32 MB, which puts most
    activation tensors in arenas). Process-wide; False where it does not apply."""
    lib = _glibc()
    if lib is None or mmap_threshold <= 0:
        return False
    ok = bool(lib.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_threshold)))
    if not ok:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) failed", mmap_threshold)
    return ok


def release_free_memory() -> None:
    """Give the free pages of every malloc arena back to the system: glibc's malloc_trim, and
    where jemalloc is preloaded (`learner.allocator`) a purge of all its arenas."""
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(ctypes.c_size_t(0))
    mallctl = _jemalloc_mallctl()
    if mallctl is not None:  # "arena.<MALLCTL_ARENAS_ALL = 4096>.purge"
        mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))


def _jemalloc_mallctl() -> Any:
    """jemalloc's mallctl when jemalloc is this process's malloc (preloaded), else None."""
    try:
        return ctypes.CDLL(None).mallctl
    except (OSError, AttributeError):
        return None


JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
"""jemalloc keeps freed pages for reuse within an update (purging by time, jemalloc's default
decay, costs page faults); `release_free_memory` purges once per update instead."""


def jemalloc_path() -> str | None:
    """The libjemalloc.so that Ray ships (ray/core/), or None where Ray lacks it."""
    spec = importlib.util.find_spec("ray")
    for root in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(root) / "core" / "libjemalloc.so"
        if lib.is_file():
            return str(lib)
    return None


PRIMITIVE_CACHE_ENV = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "128", "LRU_CACHE_CAPACITY": "128"}
"""oneDNN (and ideep, torch's wrapper of it) cache up to 1,024 compiled matmul primitives each,
keyed by shape, and a learner's micro-batches change shape every update (rows × longest row):
with the defaults the learner's resident memory creeps up with each new shape, for good. 128
entries hold every primitive one update reuses (forward, recompute and backward of each
micro-batch) and cap that growth (BENCHMARKS.md, "Learner memory")."""


def learner_process_env(allocator: str) -> dict[str, str]:
    """Environment variables a learner process starts with: the primitive-cache bound and
    `learner.allocator` (`allocator_env`)."""
    return {**PRIMITIVE_CACHE_ENV, **allocator_env(allocator)}


def allocator_env(allocator: str) -> dict[str, str]:
    """Environment variables that start a learner process on `learner.allocator`: jemalloc
    preloaded (LD_PRELOAD; where Ray ships no jemalloc, a warning and glibc), or {}."""
    if allocator != "jemalloc":
        return {}
    lib = jemalloc_path()
    if lib is None:
        log.warning("learner.allocator=jemalloc: no libjemalloc.so in the ray package; "
                    "the learner uses glibc malloc")
        return {}
    return {"LD_PRELOAD": lib, "MALLOC_CONF": JEMALLOC_CONF}

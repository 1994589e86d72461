"""What this machine's hardware says of bf16: CUDA's own answer, or the CPU's feature flags.

On CUDA the device's bf16 support decides (`torch.cuda.is_bf16_supported`: Ampere and
newer). A CPU with neither AMX-BF16 nor AVX512-BF16 (the `amx_bf16` / `avx512_bf16` flags of
/proc/cpuinfo) gets fp32 without measuring: torch and vLLM would emulate bf16 through fp32.
With either flag the micro-benchmark decides (bf16/verdicts.py), because the flag says that
bf16 instructions exist, not that the kernels each side calls run faster with them.
`cpu_model` names the CPU in the verdict cache's key; all three read the first CPU's
/proc/cpuinfo fields once (`cpu_fields`).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of bf16 matmul instructions, best first: without one, fp32 without a
probe (an AVX2-only CPU ran bf16 at 0.10-0.15x fp32 on both sides: BENCHMARKS.md)."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is not readable)."""
    return frozenset(cpu_fields().get("flags", "").split())


@functools.cache
def cpu_fields() -> dict[str, str]:
    """The first CPU's /proc/cpuinfo fields (empty where it is not readable)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_name() -> str:
    """The first CPU's model name, as `lscpu` gives it (a VM may report only "AMD EPYC")."""
    return cpu_fields().get("model name", "unknown CPU")


@functools.cache
def cpu_model() -> str:
    """The first CPU's model name with its family / model / stepping, for the cache key."""
    fields = cpu_fields()
    return (f"{cpu_name()} (family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')} stepping {fields.get('stepping', '?')})")


def bf16_support(device: str | torch.device = "auto",
                 flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """(whether `device` may multiply bf16 faster than fp32, the reason in words): CUDA's own
    answer, or on a CPU the flag pre-filter (the measurement, bf16/verdicts.py, decides there).

    `device`: auto (cuda when available), cpu, cuda, cuda:N. `flags` replaces the CPU's own
    (tests)."""
    kind = resolve_device(device).split(":")[0]
    if kind == "cuda":
        import torch

        if torch.cuda.is_bf16_supported():
            return True, f"{torch.cuda.get_device_name()} supports bf16"
        return False, f"{torch.cuda.get_device_name()} has no bf16 support"
    have = cpu_flags() if flags is None else flags
    found = [f for f in BF16_CPU_FLAGS if f in have]
    if found:
        return True, f"the CPU has {found[0].upper().replace('_', '-')}"
    return False, ("the CPU has neither AMX-BF16 nor AVX512-BF16, so bf16 matmuls would be "
                   "emulated through fp32 (several times slower)")


def resolve_device(device: str | torch.device) -> str:
    """`device` as a string, auto resolved: torch (a slow import) is asked only where an
    NVIDIA driver is loaded, so the launch driver decides a CPU machine without it."""
    if str(device) != "auto":
        return str(device)
    if not os.path.isdir("/proc/driver/nvidia"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"

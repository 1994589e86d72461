"""The run's number formats: bf16 where the hardware multiplies bf16 natively, fp32 elsewhere.

`engine.dtype: auto` and `learner.bf16: auto` (the defaults) resolve here, in the process
that uses them, so each process decides for the hardware it runs on:
- CUDA: bf16 when the device supports it (`torch.cuda.is_bf16_supported`: Ampere and newer);
- CPU: bf16 when the CPU has AMX-BF16 or AVX512-BF16 (the `amx_bf16` / `avx512_bf16` flags of
  /proc/cpuinfo). There a 2048 x 2048 bf16 matmul runs ~6x faster than fp32; without them
  torch emulates bf16 through fp32 and gains nothing.

bf16 means: the engine holds bf16 weights and computes in bf16; the learner keeps fp32 master
weights and AdamW state (`model.dtype`) and runs forward and backward under bf16 autocast on a
bf16 working copy of the weights (`learner.bf16_copy`, learner/bf16_copy.py); weights are
published in the engine's dtype. The two sides then round differently, so the behavior log-probs (engine) and the proximal ones (learner) differ a little even for fresh
tokens: decoupled PPO's importance weight w = exp(proximal − behavior) corrects exactly that,
and the learner logs its size per update (learner/mismatch.py).

An explicit `engine.dtype` or `learner.bf16: true|false` is used as written.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Literal

from agent_r1_async.config import EngineConfig, LearnerConfig

if TYPE_CHECKING:
    import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of native bf16 matmul units, best first."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is not readable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def bf16_support(device: str | torch.device = "auto",
                 flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """(whether `device` multiplies bf16 natively, the reason in words).

    `device`: auto (cuda when available), cpu, cuda, cuda:N. `flags` replaces the CPU's own
    (tests)."""
    kind = _device(device).split(":")[0]
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
                   "emulated in fp32 (no faster)")


def _device(device: str | torch.device) -> str:
    """`device` as a string, auto resolved: torch (a 2 s import) is asked only where an
    NVIDIA driver is loaded, so the launch driver decides a CPU machine without it."""
    if str(device) != "auto":
        return str(device)
    if not os.path.isdir("/proc/driver/nvidia"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


EngineDtype = Literal["float32", "bfloat16", "float16"]


def engine_dtype(cfg: EngineConfig, device: str | torch.device | None = None,
                 flags: frozenset[str] | None = None) -> EngineDtype:
    """`engine.dtype` with `auto` resolved for `device` (default: the engine's own: the
    transformers engine runs on the CPU, vLLM on CUDA where there is one)."""
    if cfg.dtype != "auto":
        return cfg.dtype
    if device is None:
        device = "cpu" if cfg.backend == "hf" else "auto"
    return "bfloat16" if bf16_support(device, flags)[0] else "float32"


def learner_bf16(cfg: LearnerConfig, device: str | torch.device | None = None,
                 flags: frozenset[str] | None = None) -> bool:
    """`learner.bf16` with `auto` resolved for `device` (default: `learner.device`)."""
    if cfg.bf16 != "auto":
        return bool(cfg.bf16)
    return bf16_support(cfg.device if device is None else device, flags)[0]


def bf16_copy_allowed(cfg: LearnerConfig) -> bool:
    """Whether the config lets a bf16 learner train on its bf16 working copy: `learner.bf16_copy`
    on one process (FSDP2 ranks keep autocast over their shards, or bf16 gathers on CUDA) without
    LoRA (whose frozen base autocast casts anyway)."""
    return cfg.bf16_copy and cfg.world_size == 1 and not cfg.lora.enabled


def describe(engine: EngineConfig, learner: LearnerConfig,
             flags: frozenset[str] | None = None) -> str:
    """One console line: the formats this machine resolves the config to, and why."""
    dtype = engine_dtype(engine, flags=flags)
    bf16 = learner_bf16(learner, flags=flags)
    ok, why = bf16_support(learner.device, flags)
    copy = " on a bf16 copy" if bf16_copy_allowed(learner) else ""
    learner_side = f"bf16 autocast{copy}, fp32 master weights" if bf16 else "fp32"
    auto = engine.dtype == "auto" or learner.bf16 == "auto"
    reason = f" ({why})" if auto else " (as configured)"
    if auto and not ok:
        reason = f" (fp32 because {why})"
    return f"precision: engine {dtype}, learner {learner_side}{reason}"

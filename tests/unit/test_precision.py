"""bf16 where it makes the hardware's matmuls faster (precision.py): the CPU flags as a
pre-filter, then a micro-benchmark whose verdict is cached. Timings are injected (`timer`),
except in the last tests, which run the real micro-benchmark and check only that it works
(a sane ratio, quickly, in the right process), never what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from agent_r1_async import precision
from agent_r1_async.config import EngineConfig, LearnerConfig
from agent_r1_async.precision import Probe

AMX = frozenset({"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"})
AVX512_BF16 = frozenset({"avx512f", "avx512_bf16"})
PLAIN = frozenset({"avx2", "avx512f"})


class Timer:
    """Injected seconds of (fp32, bf16) per probe; records the probes it was asked for."""

    def __init__(self, fp32_s: float, bf16_s: float) -> None:
        self.seconds = (fp32_s, bf16_s)
        self.probes: list[Probe] = []

    def __call__(self, probe: Probe) -> tuple[float, float]:
        self.probes.append(probe)
        return self.seconds


FASTER = 5.2   # bf16 5.2x fp32 (as on an AMX CPU)
SLOWER = 0.57  # bf16 0.57x fp32


def faster() -> Timer:
    return Timer(FASTER, 1.0)


def slower() -> Timer:
    return Timer(SLOWER, 1.0)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Each test its own cache directory (the verdicts it writes stay there)."""
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / precision.CACHE_FILE


def new_process() -> None:
    """Forget this process's verdicts, as another process of the launch starts without them."""
    precision._MEMO.clear()


def test_the_flags_are_only_a_prefilter():
    assert precision.bf16_support("cpu", AMX) == (True, "the CPU has AMX-BF16")
    assert precision.bf16_support("cpu", AVX512_BF16) == (True, "the CPU has AVX512-BF16")
    ok, why = precision.bf16_support("cpu", PLAIN)
    assert not ok and "neither AMX-BF16 nor AVX512-BF16" in why
    # no bf16 flag: fp32, and nothing is measured
    t = faster()
    v = precision.cpu_verdict(Probe("torch", 576, 1536), PLAIN, t)
    assert not v.bf16 and v.ratio is None and t.probes == []
    assert v.why.startswith("fp32 because the CPU has neither AMX-BF16 nor AVX512-BF16")
    assert precision.learner_bf16(LearnerConfig(device="cpu"), flags=PLAIN, timer=t) is False
    assert precision.engine_dtype(EngineConfig(), "cpu", PLAIN, timer=t) == "float32"
    assert t.probes == []


@pytest.mark.parametrize("flags", [AMX, AVX512_BF16])
def test_the_measurement_decides_where_a_flag_is_present(flags):
    auto_e, auto_l = EngineConfig(), LearnerConfig(device="cpu")
    assert (auto_e.dtype, auto_l.bf16) == ("auto", "auto")  # the schema's defaults
    # bf16 faster: bf16 (the default model's shapes)
    assert precision.engine_dtype(auto_e, "cpu", flags, timer=faster()) == "bfloat16"
    assert precision.learner_bf16(auto_l, flags=flags, timer=faster()) is True
    # bf16 slower: fp32 (another model's shapes: a verdict of its own)
    assert precision.engine_dtype(auto_e, "cpu", flags, model="tiny-random-llama",
                                  timer=slower()) == "float32"
    v = precision.learner_verdict(auto_l, flags=flags, model="tiny-random-llama", timer=slower())
    assert v.bf16 is False and v.ratio == pytest.approx(SLOWER)
    assert v.why == "bf16 matmul 0.57x fp32 on this CPU, measured"


def test_bf16_needs_the_margin():
    assert precision.BF16_MARGIN == 1.1
    v = precision.cpu_verdict(Probe("torch", 64, 128), AMX, Timer(1.05, 1.0))
    assert not v.bf16 and v.why == "bf16 matmul 1.05x fp32 on this CPU, measured; bf16 needs 1.10x"
    assert precision.cpu_verdict(Probe("torch", 64, 256), AMX, Timer(1.1, 1.0)).bf16


def test_each_side_measures_its_own_op_at_the_model_shapes(tmp_path):
    t = slower()
    precision.engine_dtype(EngineConfig(), "cpu", AMX, timer=t)  # vLLM: vLLM's linear
    precision.engine_dtype(EngineConfig(backend="hf"), flags=AMX, timer=t)  # transformers: torch
    precision.learner_bf16(LearnerConfig(device="cpu", num_cpus=2), flags=AMX,
                           model="tiny-random-llama", timer=t)
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 14336}))
    precision.learner_bf16(LearnerConfig(device="cpu"), flags=AMX, model=str(big), timer=t)
    assert t.probes == [
        Probe("vllm", 576, 1536, threads=1),    # the default model's shapes, one engine thread
        Probe("torch", 576, 1536, threads=1),
        Probe("torch", 128, 256, threads=2),    # the tiny model; ceil(learner.num_cpus) threads
        Probe("torch", 1024, 4096, threads=1),  # capped: the micro-benchmark stays short
    ]
    assert all(p.tokens == precision.TOKENS for p in t.probes)


def test_the_verdict_is_cached_and_a_hit_is_not_measured_again(_cache):
    learner = LearnerConfig(device="cpu")
    first = precision.learner_verdict(learner, flags=AMX, timer=faster())
    assert first.bf16 and first.why == "bf16 matmul 5.20x fp32 on this CPU, measured"
    entry = json.loads(_cache.read_text())["verdicts"][Probe("torch", 576, 1536).key()]
    assert entry["ratio"] == FASTER and entry["seconds"] >= 0
    # this process keeps its verdict as decided
    assert precision.learner_verdict(learner, flags=AMX, timer=slower()) == first
    # another process (here: a timer that would say the opposite) reads the same verdict
    new_process()
    again = slower()
    hit = precision.learner_verdict(learner, flags=AMX, timer=again)
    assert again.probes == [] and hit.bf16 and hit.ratio == FASTER
    assert hit.why == "bf16 matmul 5.20x fp32 on this CPU, cached"
    # the key names the op, the CPU, the library versions, the shape and the threads
    key = Probe("vllm", 576, 1536, threads=1).key()
    assert key.startswith(f"vllm linear | {precision.cpu_model()} | torch ")
    assert "vllm " in key and "256x576x1536 | 1 thread(s)" in key


@pytest.mark.parametrize("content", ["{not json", '{"verdicts": []}', '{"verdicts": {"k": 1}}'])
def test_a_corrupt_cache_is_measured_again_and_rewritten(_cache, content):
    _cache.parent.mkdir(parents=True)
    _cache.write_text(content)
    t = slower()
    v = precision.learner_verdict(LearnerConfig(device="cpu"), flags=AMX, timer=t)
    assert len(t.probes) == 1 and not v.bf16
    assert "measured" in v.why
    if content != '{"verdicts": {"k": 1}}':  # a bad entry alone is only skipped
        assert f"the cache {_cache} is corrupt" in v.why and "re-measured" in v.why
    assert Probe("torch", 576, 1536).key() in json.loads(_cache.read_text())["verdicts"]


def test_an_unwritable_cache_does_not_fail_the_decision(_cache):
    _cache.parent.mkdir(parents=True)
    _cache.mkdir()  # a directory where the file belongs: neither readable nor replaceable
    t = faster()
    v = precision.learner_verdict(LearnerConfig(device="cpu"), flags=AMX, timer=t)
    assert v.bf16 and len(t.probes) == 1
    assert "is unreadable" in v.why and "not cached" in v.why


def test_explicit_values_are_used_as_written():
    t = faster()
    assert precision.engine_dtype(EngineConfig(dtype="float32"), "cpu", AMX, timer=t) == "float32"
    assert precision.engine_dtype(EngineConfig(dtype="bfloat16"), "cpu", PLAIN) == "bfloat16"
    assert precision.learner_bf16(LearnerConfig(bf16=False), "cpu", AMX, timer=t) is False
    assert precision.learner_bf16(LearnerConfig(bf16=True), "cpu", PLAIN) is True
    assert t.probes == []


def test_describe_is_one_line_with_the_measured_ratio():
    e, lc = EngineConfig(backend="hf"), LearnerConfig(device="cpu")  # one op, one verdict
    assert precision.describe(e, lc, AMX, timer=faster()) == (
        "precision: engine bfloat16, learner bf16 autocast on a bf16 copy, fp32 master weights "
        "(bf16 matmul 5.20x fp32 on this CPU, measured)")
    new_process()
    assert precision.describe(e, LearnerConfig(device="cpu", bf16_copy=False), AMX,
                              timer=slower()) == (
        "precision: engine bfloat16, learner bf16 autocast, fp32 master weights "
        "(bf16 matmul 5.20x fp32 on this CPU, cached)")
    # the vLLM engine measures vLLM's linear: a verdict per side
    line = precision.describe(EngineConfig(), lc, AVX512_BF16, model="tiny-random-llama",
                              timer=slower())
    assert line == ("precision: engine float32, learner fp32 (engine: bf16 vLLM linear 0.57x "
                    "fp32 on this CPU, measured; learner: bf16 matmul 0.57x fp32 on this CPU, "
                    "measured)")
    line = precision.describe(e, lc, PLAIN)
    assert line.startswith("precision: engine float32, learner fp32 (fp32 because the CPU has "
                           "neither AMX-BF16 nor AVX512-BF16")
    fixed = precision.describe(EngineConfig(dtype="float32"), LearnerConfig(bf16=False), AMX)
    assert fixed == "precision: engine float32, learner fp32 (as configured)"
    new_process()
    half = precision.describe(EngineConfig(dtype="float32"), lc, AMX, timer=slower())
    assert half == ("precision: engine float32, learner bf16 autocast on a bf16 copy, fp32 "
                    "master weights (engine: as configured; learner: bf16 matmul 5.20x fp32 "
                    "on this CPU, cached)")


def test_model_shapes_come_from_the_model_config(tmp_path):
    assert precision.model_shape(None) == precision.DEFAULT_SHAPE == (576, 1536)
    assert precision.model_shape("smollm2-135m-instruct") == (576, 1536)
    assert precision.model_shape("tiny-random-llama") == (128, 256)
    assert precision.model_shape("Org/not-on-disk") == precision.DEFAULT_SHAPE
    (tmp_path / "config.json").write_text(json.dumps(
        {"text_config": {"hidden_size": 896, "intermediate_size": 4864}}))
    assert precision.model_shape(str(tmp_path)) == (896, 4864)


def test_the_real_micro_benchmark_runs(monkeypatch):
    """The real measurement on this machine: a sane ratio, in a bounded number of runs (its
    cost is counted, not timed: no speed assertion)."""
    runs: dict[torch.dtype, int] = {}
    linears = precision._linears

    def counted(probe: Probe, dtype: torch.dtype):
        run = linears(probe, dtype)

        def once():
            runs[dtype] = runs.get(dtype, 0) + 1
            return run()

        return once

    monkeypatch.setattr(precision, "_linears", counted)
    probe = Probe.for_model("torch", None, 1)
    fp32_s, bf16_s = precision.measure(probe)
    assert fp32_s > 0 and bf16_s > 0 and 0.01 < fp32_s / bf16_s < 100
    # one warm-up, then REPEATS or more timed runs (up to MAX_REPEATS), the dtypes interleaved
    assert set(runs) == {torch.float32, torch.bfloat16} and len(set(runs.values())) == 1
    assert 1 + precision.REPEATS <= runs[torch.float32] <= 1 + precision.MAX_REPEATS
    threads = torch.get_num_threads()
    precision.measure(Probe("torch", 64, 128, threads=1))
    assert torch.get_num_threads() == threads  # the process's thread count is restored
    # and through the whole decision, on this machine's own flags, cached for the next call
    v = precision.cpu_verdict(probe)
    assert v.ratio is None or v.ratio > 0
    assert precision.cpu_verdict(probe) == v


def test_this_machine_flags_are_read():
    flags = precision.cpu_flags()
    assert isinstance(flags, frozenset)
    if not torch.cuda.is_available() and not flags & set(precision.BF16_CPU_FLAGS):
        assert precision.learner_bf16(LearnerConfig(device="auto")) is False


def test_a_vllm_probe_that_cannot_call_vllm_measures_torch_and_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.utils", None)  # import fails
    fp32_s, bf16_s, note = precision.measure_noted(Probe("vllm", 64, 128))
    assert fp32_s > 0 and bf16_s > 0
    assert note.startswith("vLLM's linear could not run here (ModuleNotFoundError: ")
    assert note.endswith("so torch's matmul was measured instead")


DRIVER = """
import sys
from agent_r1_async import precision
from agent_r1_async.config import EngineConfig, LearnerConfig

if __name__ == "__main__":
    print(precision.describe(EngineConfig(backend="hf"), LearnerConfig(device="cpu"),
                             model="tiny-random-llama"))
    print("torch imported:", "torch" in sys.modules)
"""


def test_the_launch_driver_measures_in_a_child_and_the_next_process_reads_the_cache(tmp_path):
    """As the launch driver: torch is never imported there (the probe runs in a spawned child),
    and a second process reuses the cached verdict. Real timings, no assertion on them."""
    if not precision.cpu_flags() & set(precision.BF16_CPU_FLAGS):
        pytest.skip("no bf16 flag on this CPU: nothing is measured")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "AGENT_R1_ASYNC_CACHE": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, timeout=120, check=True).stdout for _ in range(2)]
    for out, how in zip(runs, ("measured", "cached"), strict=True):
        line, imported = out.splitlines()[-2:]
        assert line.startswith("precision: engine ") and f"fp32 on this CPU, {how})" in line
        assert imported == "torch imported: False"
    verdicts = json.loads((tmp_path / "cache" / precision.CACHE_FILE).read_text())["verdicts"]
    assert list(verdicts) == [Probe("torch", 128, 256).key()]

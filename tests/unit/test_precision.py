"""`engine.dtype: auto` and `learner.bf16: auto` resolved (precision.py): each side's verdict on
its own op at the model's shapes, explicit values as written, the console line, and the launch
driver measuring in a child. Timings are injected (`Timer`), except in the last test, which
runs the real micro-benchmark and checks only where it ran, never what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from agent_r1_async import precision
from agent_r1_async.bf16.hardware import BF16_CPU_FLAGS, cpu_flags
from agent_r1_async.bf16.probe import TOKENS, Probe
from agent_r1_async.bf16.verdicts import CACHE_FILE
from agent_r1_async.config import EngineConfig, LearnerConfig
from tests.fakes.bf16 import (
    AMX,
    AVX512_BF16,
    PLAIN,
    SLOWER,
    faster,
    new_process,
    own_cache,
    slower,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    return own_cache(tmp_path, monkeypatch)


def test_without_a_bf16_flag_both_sides_are_fp32_unmeasured():
    t = faster()
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
    assert all(p.tokens == TOKENS for p in t.probes)


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


def test_without_a_flag_or_cuda_this_machine_trains_in_fp32():
    if not torch.cuda.is_available() and not cpu_flags() & set(BF16_CPU_FLAGS):
        assert precision.learner_bf16(LearnerConfig(device="auto")) is False


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
    if not cpu_flags() & set(BF16_CPU_FLAGS):
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
    verdicts = json.loads((tmp_path / "cache" / CACHE_FILE).read_text())["verdicts"]
    assert list(verdicts) == [Probe("torch", 128, 256).key()]

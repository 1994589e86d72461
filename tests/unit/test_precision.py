"""bf16 where the hardware multiplies it natively (precision.py), decided from CPU flags."""

from __future__ import annotations

import torch

from agent_r1_async import precision
from agent_r1_async.config import EngineConfig, LearnerConfig

AMX = frozenset({"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"})
AVX512_BF16 = frozenset({"avx512f", "avx512_bf16"})
PLAIN = frozenset({"avx2", "avx512f"})


def test_cpu_bf16_needs_amx_or_avx512_bf16():
    assert precision.bf16_support("cpu", AMX) == (True, "the CPU has AMX-BF16")
    assert precision.bf16_support("cpu", AVX512_BF16) == (True, "the CPU has AVX512-BF16")
    ok, why = precision.bf16_support("cpu", PLAIN)
    assert not ok and "neither AMX-BF16 nor AVX512-BF16" in why


def test_auto_resolves_per_hardware_and_explicit_values_stay():
    auto_e, auto_l = EngineConfig(), LearnerConfig(device="cpu")
    assert (auto_e.dtype, auto_l.bf16) == ("auto", "auto")  # the schema's defaults
    assert precision.engine_dtype(auto_e, "cpu", AMX) == "bfloat16"
    assert precision.engine_dtype(auto_e, "cpu", PLAIN) == "float32"
    # the transformers engine runs on the CPU: its CPU's flags decide, whatever GPU there is
    assert precision.engine_dtype(EngineConfig(backend="hf"), flags=AMX) == "bfloat16"
    assert precision.engine_dtype(EngineConfig(backend="hf"), flags=PLAIN) == "float32"
    assert precision.learner_bf16(auto_l, flags=AMX) is True
    assert precision.learner_bf16(auto_l, flags=PLAIN) is False
    assert precision.engine_dtype(EngineConfig(dtype="float32"), "cpu", AMX) == "float32"
    assert precision.learner_bf16(LearnerConfig(bf16=False), "cpu", AMX) is False
    assert precision.learner_bf16(LearnerConfig(bf16=True), "cpu", PLAIN) is True


def test_describe_is_one_line_that_says_why():
    e, lc = EngineConfig(), LearnerConfig(device="cpu")
    assert precision.describe(e, lc, AMX) == (
        "precision: engine bfloat16, learner bf16 autocast on a bf16 copy, fp32 master weights "
        "(the CPU has AMX-BF16)")
    plain = precision.describe(e, LearnerConfig(device="cpu", bf16_copy=False), AMX)
    assert plain == ("precision: engine bfloat16, learner bf16 autocast, fp32 master weights "
                     "(the CPU has AMX-BF16)")
    line = precision.describe(e, lc, PLAIN)
    assert line.startswith("precision: engine float32, learner fp32 (fp32 because the CPU has "
                           "neither AMX-BF16 nor AVX512-BF16")
    fixed = precision.describe(EngineConfig(dtype="float32"), LearnerConfig(bf16=False), AMX)
    assert fixed == "precision: engine float32, learner fp32 (as configured)"


def test_this_machine_flags_are_read():
    flags = precision.cpu_flags()
    assert isinstance(flags, frozenset)
    if not torch.cuda.is_available() and "amx_bf16" in flags:
        assert precision.bf16_support("auto") == (True, "the CPU has AMX-BF16")

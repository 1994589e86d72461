"""What the hardware says of bf16 (bf16/hardware.py): CUDA's answer, the CPU's flags."""

from __future__ import annotations

from agent_r1_async.bf16 import hardware
from tests.fakes.bf16 import AMX, AVX512_BF16, PLAIN


def test_a_bf16_flag_is_named_and_its_absence_explained():
    assert hardware.bf16_support("cpu", AMX) == (True, "the CPU has AMX-BF16")
    assert hardware.bf16_support("cpu", AVX512_BF16) == (True, "the CPU has AVX512-BF16")
    ok, why = hardware.bf16_support("cpu", PLAIN)
    assert not ok and "neither AMX-BF16 nor AVX512-BF16" in why


def test_this_machine_flags_and_model_are_read():
    assert isinstance(hardware.cpu_flags(), frozenset)
    assert "(family " in hardware.cpu_model()

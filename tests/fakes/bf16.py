"""Injected micro-benchmark timings and CPU flag sets for the bf16 decision (bf16/,
precision.py): a `Timer` stands in for the measurement and records the probes it was asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_r1_async.bf16 import verdicts
from agent_r1_async.bf16.probe import Probe

AMX = frozenset({"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"})
AVX512_BF16 = frozenset({"avx512f", "avx512_bf16"})
PLAIN = frozenset({"avx2", "avx512f"})

FASTER = 5.2   # bf16 5.2x fp32 (as on an AMX CPU)
SLOWER = 0.57  # bf16 0.57x fp32


class Timer:
    """Injected seconds of (fp32, bf16) per probe; records the probes it was asked for."""

    def __init__(self, fp32_s: float, bf16_s: float) -> None:
        self.seconds = (fp32_s, bf16_s)
        self.probes: list[Probe] = []

    def __call__(self, probe: Probe) -> tuple[float, float]:
        self.probes.append(probe)
        return self.seconds


def faster() -> Timer:
    return Timer(FASTER, 1.0)


def slower() -> Timer:
    return Timer(SLOWER, 1.0)


def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the test's own (the verdicts it writes stay there); the verdict
    file's path."""
    monkeypatch.setenv("AGENT_R1_ASYNC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / verdicts.CACHE_FILE


def new_process() -> None:
    """Forget this process's verdicts, as another process of the launch starts without them."""
    verdicts._MEMO.clear()

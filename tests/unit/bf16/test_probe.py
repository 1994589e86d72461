"""The micro-benchmark (bf16/probe.py): the shapes it measures at, and the real measurement,
checked only for working (a sane ratio, a bounded number of runs), never for what it measured."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from agent_r1_async.bf16 import probe as bf16_probe
from agent_r1_async.bf16.probe import Probe
from agent_r1_async.bf16.verdicts import cpu_verdict
from tests.fakes.bf16 import own_cache


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    return own_cache(tmp_path, monkeypatch)


def test_model_shapes_come_from_the_model_config(tmp_path):
    assert bf16_probe.model_shape(None) == bf16_probe.DEFAULT_SHAPE == (576, 1536)
    assert bf16_probe.model_shape("smollm2-135m-instruct") == (576, 1536)
    assert bf16_probe.model_shape("tiny-random-llama") == (128, 256)
    assert bf16_probe.model_shape("Org/not-on-disk") == bf16_probe.DEFAULT_SHAPE
    (tmp_path / "config.json").write_text(json.dumps(
        {"text_config": {"hidden_size": 896, "intermediate_size": 4864}}))
    assert bf16_probe.model_shape(str(tmp_path)) == (896, 4864)


def test_the_real_micro_benchmark_runs(monkeypatch):
    """The real measurement on this machine: a sane ratio, in a bounded number of runs (its
    cost is counted, not timed: no speed assertion)."""
    runs: dict[torch.dtype, int] = {}
    linears = bf16_probe._linears

    def counted(probe: Probe, dtype: torch.dtype):
        run = linears(probe, dtype)

        def once():
            runs[dtype] = runs.get(dtype, 0) + 1
            return run()

        return once

    monkeypatch.setattr(bf16_probe, "_linears", counted)
    probe = Probe.for_model("torch", None, 1)
    fp32_s, bf16_s = bf16_probe.measure(probe)
    assert fp32_s > 0 and bf16_s > 0 and 0.01 < fp32_s / bf16_s < 100
    # one warm-up, then REPEATS or more timed runs (up to MAX_REPEATS), the dtypes interleaved
    assert set(runs) == {torch.float32, torch.bfloat16} and len(set(runs.values())) == 1
    assert 1 + bf16_probe.REPEATS <= runs[torch.float32] <= 1 + bf16_probe.MAX_REPEATS
    threads = torch.get_num_threads()
    bf16_probe.measure(Probe("torch", 64, 128, threads=1))
    assert torch.get_num_threads() == threads  # the process's thread count is restored
    # and through the whole decision, on this machine's own flags, cached for the next call
    v = cpu_verdict(probe)
    assert v.ratio is None or v.ratio > 0
    assert cpu_verdict(probe) == v


def test_a_vllm_probe_that_cannot_call_vllm_measures_torch_and_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.utils", None)  # import fails
    fp32_s, bf16_s, note = bf16_probe.measure_noted(Probe("vllm", 64, 128))
    assert fp32_s > 0 and bf16_s > 0
    assert note.startswith("vLLM's linear could not run here (ModuleNotFoundError: ")
    assert note.endswith("so torch's matmul was measured instead")

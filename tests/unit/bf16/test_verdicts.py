"""A CPU's bf16 verdict (bf16/verdicts.py): nothing measured without a flag, the margin, the
cache (hit, corrupt, unwritable). Timings are injected (`Timer`)."""

from __future__ import annotations

import json

import pytest

from agent_r1_async.bf16 import verdicts
from agent_r1_async.bf16.hardware import cpu_model
from agent_r1_async.bf16.probe import Probe
from tests.fakes.bf16 import (
    AMX,
    FASTER,
    PLAIN,
    Timer,
    faster,
    new_process,
    own_cache,
    slower,
)

DEFAULT = Probe("torch", 576, 1536)
"""The learner's probe of the default model on one thread."""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    return own_cache(tmp_path, monkeypatch)


def test_without_a_bf16_flag_nothing_is_measured():
    t = faster()
    v = verdicts.cpu_verdict(Probe("torch", 576, 1536), PLAIN, t)
    assert not v.bf16 and v.ratio is None and t.probes == []
    assert v.why.startswith("fp32 because the CPU has neither AMX-BF16 nor AVX512-BF16")


def test_bf16_needs_the_margin():
    assert verdicts.BF16_MARGIN == 1.1
    v = verdicts.cpu_verdict(Probe("torch", 64, 128), AMX, Timer(1.05, 1.0))
    assert not v.bf16 and v.why == "bf16 matmul 1.05x fp32 on this CPU, measured; bf16 needs 1.10x"
    assert verdicts.cpu_verdict(Probe("torch", 64, 256), AMX, Timer(1.1, 1.0)).bf16


def test_the_verdict_is_cached_and_a_hit_is_not_measured_again(_cache):
    first = verdicts.cpu_verdict(DEFAULT, AMX, faster())
    assert first.bf16 and first.why == "bf16 matmul 5.20x fp32 on this CPU, measured"
    entry = json.loads(_cache.read_text())["verdicts"][Probe("torch", 576, 1536).key()]
    assert entry["ratio"] == FASTER and entry["seconds"] >= 0
    # this process keeps its verdict as decided
    assert verdicts.cpu_verdict(DEFAULT, AMX, slower()) == first
    # another process (here: a timer that would say the opposite) reads the same verdict
    new_process()
    again = slower()
    hit = verdicts.cpu_verdict(DEFAULT, AMX, again)
    assert again.probes == [] and hit.bf16 and hit.ratio == FASTER
    assert hit.why == "bf16 matmul 5.20x fp32 on this CPU, cached"
    # the key names the op, the CPU, the library versions, the shape and the threads
    key = Probe("vllm", 576, 1536, threads=1).key()
    assert key.startswith(f"vllm linear | {cpu_model()} | torch ")
    assert "vllm " in key and "256x576x1536 | 1 thread(s)" in key


@pytest.mark.parametrize("content", ["{not json", '{"verdicts": []}', '{"verdicts": {"k": 1}}'])
def test_a_corrupt_cache_is_measured_again_and_rewritten(_cache, content):
    _cache.parent.mkdir(parents=True)
    _cache.write_text(content)
    t = slower()
    v = verdicts.cpu_verdict(DEFAULT, AMX, t)
    assert len(t.probes) == 1 and not v.bf16
    assert "measured" in v.why
    if content != '{"verdicts": {"k": 1}}':  # a bad entry alone is only skipped
        assert f"the cache {_cache} is corrupt" in v.why and "re-measured" in v.why
    assert Probe("torch", 576, 1536).key() in json.loads(_cache.read_text())["verdicts"]


def test_an_unwritable_cache_does_not_fail_the_decision(_cache):
    _cache.parent.mkdir(parents=True)
    _cache.mkdir()  # a directory where the file belongs: neither readable nor replaceable
    t = faster()
    v = verdicts.cpu_verdict(DEFAULT, AMX, t)
    assert v.bf16 and len(t.probes) == 1
    assert "is unreadable" in v.why and "not cached" in v.why

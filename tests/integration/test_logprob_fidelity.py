"""Log-prob fidelity: each engine's behavior log-probs vs one transformers forward pass over
the same tokens and weights. Prints max / mean absolute difference (run with -s to see them).

The reference is teacher-forced: one unpadded, uncached forward over context + action with
the same temperature / top-p processing (hf_engine.process_logits), then the log-prob of each
sampled token. Contexts are real chat-formatted arithmetic prompts of different lengths,
generated concurrently (so batching and left padding are exercised).
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agent_r1_async.actors.engines.base import Engine, GenResult, SamplingSettings
from agent_r1_async.actors.engines.hf import HFEngine, process_logits
from agent_r1_async.config import EngineConfig, EnvConfig
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_causal_lm, load_tokenizer, resolve_model, tiny_model_dir


def chat_contexts(model_path: str, n: int = 6) -> list[list[int]]:
    tok = load_tokenizer(model_path)
    tasks = get_env_spec(EnvConfig(name="arithmetic")).tasks("dev")[:n]
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": t.prompt * (1 + i % 3)}],  # lengths differ
            add_generation_prompt=True, tokenize=True, return_dict=False,
        )
        for i, t in enumerate(tasks)
    ]


def reference_logprobs(
    model, context: list[int], action: list[int], temperature: float = 1.0, top_p: float = 1.0
) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context + action])).logits[0]  # [T, V]
    pred = logits[len(context) - 1 : len(context) - 1 + len(action)]  # predicts the action
    logp = torch.log_softmax(process_logits(pred, temperature, top_p), dim=-1)
    return logp.gather(-1, torch.tensor(action)[:, None])[:, 0]


def logprob_gap(
    engine: Engine, model, contexts: list[list[int]], max_new_tokens: int,
    temperature: float = 1.0, top_p: float = 1.0,
) -> tuple[float, float, int]:
    """(max |Δ|, mean |Δ|, tokens) between engine log-probs and the reference."""

    async def run() -> list[GenResult]:
        return await asyncio.gather(*(engine.generate(c, max_new_tokens) for c in contexts))

    results = asyncio.run(run())
    gaps = torch.cat([
        (torch.tensor(r.logprobs) - reference_logprobs(model, c, r.action_ids, temperature, top_p))
        .abs()
        for c, r in zip(contexts, results, strict=True)
    ])
    return gaps.max().item(), gaps.mean().item(), gaps.numel()


def _hf_engine(path: str, dtype: str, **sampling: float) -> HFEngine:
    cfg = EngineConfig(backend="hf", dtype=dtype, max_concurrent_requests=16)
    return HFEngine(cfg, path, SamplingSettings(seed=3, **sampling), 2048)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.8, 0.95)])
def test_hf_engine_fidelity_tiny_fp32(temperature, top_p):
    path = tiny_model_dir()
    engine = _hf_engine(path, "float32", temperature=temperature, top_p=top_p)
    mx, mean, n = logprob_gap(engine, engine.model, chat_contexts(path), 24, temperature, top_p)
    print(f"\nhf engine tiny fp32 T={temperature} p={top_p}: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    # Same fp32 weights, cached left-padded decode vs one forward: rounding only.
    assert mx < 1e-4 and mean < 1e-5


@pytest.mark.slow
def test_hf_engine_fidelity_smollm2():
    path = resolve_model("smollm2-135m-instruct")
    reference = load_causal_lm(path, "float32")
    contexts = chat_contexts(path, 4)
    engine = _hf_engine(path, "float32")
    mx, mean, n = logprob_gap(engine, reference, contexts, 32)
    print(f"\nhf engine SmolLM2 fp32: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    assert mx < 1e-3 and mean < 1e-4
    engine = _hf_engine(path, "bfloat16")
    mx, mean, n = logprob_gap(engine, reference, contexts, 32)
    print(f"hf engine SmolLM2 bf16 vs fp32 reference: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    assert mean < 0.1  # bf16 rounding of weights and activations, not a different policy


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize(
    "dtype,max_bound,mean_bound",
    # bf16: the engine's rounding of weights and activations vs the fp32 reference.
    [("float32", 1e-3, 1e-4), ("bfloat16", 1.0, 0.1)],
)
def test_vllm_engine_fidelity_smollm2(dtype, max_bound, mean_bound):
    pytest.importorskip("vllm")
    from agent_r1_async.actors.engines.vllm import VllmEngine

    path = resolve_model("smollm2-135m-instruct")
    reference = load_causal_lm(path, "float32")
    cfg = EngineConfig(dtype=dtype, kv_cache_gb=1, max_concurrent_requests=16)
    engine = VllmEngine(cfg, path, SamplingSettings(seed=3), 2048)
    try:
        mx, mean, n = logprob_gap(engine, reference, chat_contexts(path, 4), 32)
    finally:
        engine.close_sync()
    print(f"\nvllm engine SmolLM2 {dtype}: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    assert mx < max_bound and mean < mean_bound

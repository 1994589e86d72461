"""vLLM's weight-transfer API on the vLLM CPU engine, through our gloo engine
(weights.backend: vllm_gloo): the engine receives three versions while requests run; after
each, its log-probs equal a transformers forward with the same weights (the fp32 tolerance of
test_vllm_engine / test_logprob_fidelity) and every token's version is exact.

The learner side is the real `NativeWeightSender` in this process; the engine's worker
(a process vLLM spawns) loads our engine through the `vllm.general_plugins` entry point, so
this needs the package installed (`pip install -e .`). One engine start (~40-90 s here).
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from test_logprob_fidelity import chat_contexts, logprob_gap, reference_logprobs

from agent_r1_async.actors.engines.base import SamplingSettings
from agent_r1_async.config import EngineConfig
from agent_r1_async.models import load_causal_lm, tiny_model_dir
from tests.setup_needs import require_module

require_module("vllm")
pytestmark = pytest.mark.vllm

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def engine():
    from agent_r1_async.actors.engines.vllm import VllmEngine

    cfg = EngineConfig(dtype="float32", kv_cache_gb=1, max_concurrent_requests=16)
    eng = VllmEngine(cfg, tiny_model_dir(), SamplingSettings(max_new_tokens=64, seed=0), 512,
                     weight_transfer="agent_r1_gloo")
    try:
        yield eng
    finally:
        eng.close_sync()


async def _update_mid_requests(engine, sender, channel, state, version):
    """Four long requests; `version` is published 0.3 s in and pulled by the actor's loop."""
    contexts = [[1, 2, 3, 4 + i] for i in range(4)]
    tasks = [asyncio.create_task(engine.generate(c, 160)) for c in contexts]
    await asyncio.sleep(0.3)
    sender.publish(version, state)
    while engine.version < version:  # the actor loop: one channel turn every 10 ms
        await channel.update(engine)
        await asyncio.sleep(0.01)
    return contexts, await asyncio.gather(*tasks)


def test_three_versions_in_flight_through_the_gloo_engine(engine):
    from agent_r1_async.weights.native_receiver import NativeWeightReceiver
    from agent_r1_async.weights.native_sender import NativeWeightSender

    model = load_causal_lm(tiny_model_dir())
    base = {k: v.clone() for k, v in model.state_dict().items()}
    sender = NativeWeightSender("vllm_gloo", "127.0.0.1", 0, TIMEOUT_S)
    channel = NativeWeightReceiver(sender.endpoint, "actor-0", TIMEOUT_S)
    try:
        for version, scale in ((1, 1.25), (2, 0.8), (3, 1.1)):
            old = engine.version
            state = {k: v * scale for k, v in base.items()}
            contexts, results = asyncio.run(
                asyncio.wait_for(_update_mid_requests(engine, sender, channel, state, version),
                                 120))
            model.load_state_dict(state)
            assert engine.version == version
            assert any(r.token_versions for r in results), "the update landed after every request"
            for ctx, r in zip(contexts, results, strict=True):
                versions = r.token_versions or [r.policy_version] * len(r.action_ids)
                assert r.policy_version == min(versions) == old
                assert versions == sorted(versions) and set(versions) <= {old, version}
                is_new = torch.tensor(versions) == version
                if is_new.any():  # re-prefilled under the new weights: exactly its log-probs
                    gap = (torch.tensor(r.logprobs)
                           - reference_logprobs(model, ctx, r.action_ids)).abs()
                    assert gap[is_new].max().item() < 1e-4
            mx, mean, n = logprob_gap(engine, model, chat_contexts(tiny_model_dir()), 32)
            print(f"\nv{version} via gloo: max {mx:.2e} mean {mean:.2e} ({n} tok)")
            assert mx < 1e-4 and mean < 1e-5
        assert sender.wait_acked(3, timeout_s=5)
        assert (sender.sent, sender.failed, sender.rejected) == (3, 0, 0)
        assert (channel.failed, channel.rejected) == (0, 0)
    finally:
        sender.close()


@pytest.mark.slow
def test_launch_with_vllm_gloo_trains_on_versions_sent_through_vllms_api(tmp_path):
    """`launch` (Ray, buffer, learner, one vLLM actor) with weights.backend=vllm_gloo: the
    learner's publish goes through `NativeWeightSender`, the actor's loop through
    `NativeWeightReceiver`; with buffer.max_staleness 1 (tiny.yaml) update 3 can only train on
    data from a version the actor received that way."""
    from test_launch import _launch, _records

    run_dir, _ = _launch(
        tmp_path, "--set", "engine.backend=vllm", "--set", "weights.backend=vllm_gloo",
        "--set", "actors.num_actors=1", "--set", "engine.kv_cache_gb=1", timeout=600,
    )
    rows = _records(run_dir)
    assert [r["update"] for r in rows] == [1, 2, 3]
    assert all(r["staleness/max"] <= 1 for r in rows)
    served = [r["actor/actor-0/policy_version"] for r in rows if "actor/actor-0/policy_version" in r]
    assert served and max(served) >= 2

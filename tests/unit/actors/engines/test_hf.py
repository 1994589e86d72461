"""The transformers engine: batched sampling, exact behavior log-probs, weights, budgets."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from agent_r1_async.actors.engines.base import GenResult, SamplingSettings, compact_versions
from agent_r1_async.actors.engines.hf import HFEngine, _Row
from agent_r1_async.config import EngineConfig
from agent_r1_async.models import tiny_model_dir
from agent_r1_async.sampling import process_logits


def _engine(**sampling: float) -> HFEngine:
    cfg = EngineConfig(backend="hf", dtype="float32", max_new_tokens=6)
    return HFEngine(cfg, tiny_model_dir(), SamplingSettings(max_new_tokens=6, seed=1, **sampling), 256)


@pytest.fixture(scope="module")
def engine() -> HFEngine:
    return _engine()


def _reference_logprobs(model, context: list[int], action: list[int], temp: float, top_p: float):
    """Teacher-forced log-probs of `action` after `context`: one forward, no cache, no padding."""
    ids = torch.tensor([context + action])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]  # [T, V]
    # Position t predicts token t+1: the action tokens are predicted from len(context)-1 on.
    pred = logits[len(context) - 1 : len(context) - 1 + len(action)]
    logp = torch.log_softmax(process_logits(pred, temp, top_p), dim=-1)
    return logp.gather(-1, torch.tensor(action)[:, None])[:, 0]


def test_process_logits_top_p_keeps_smallest_prefix_reaching_p():
    # probs 0.5, 0.3, 0.15, 0.05 (shuffled order); top_p 0.7: mass before token 2 is 0.5 < 0.7
    # (kept), before token 3 is 0.8 >= 0.7 (dropped) -> renormalized 0.5/0.8, 0.3/0.8.
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    out = torch.log_softmax(process_logits(probs.log(), 1.0, 0.7), dim=-1)[0]
    assert out[1].item() == pytest.approx(math.log(0.625), abs=1e-6)
    assert out[3].item() == pytest.approx(math.log(0.375), abs=1e-6)
    assert torch.isinf(out[0]) and torch.isinf(out[2])


def test_process_logits_temperature_divides():
    # logits [2, 0] at T=2 -> [1, 0]: p = e/(e+1)
    out = torch.softmax(process_logits(torch.tensor([[2.0, 0.0]]), 2.0, 1.0), dim=-1)
    assert out[0, 0].item() == pytest.approx(math.e / (math.e + 1), abs=1e-6)


def test_concurrent_requests_share_one_batch_and_logprobs_match_forward(engine):
    calls = []
    original = engine._sample_batch

    def counting(contexts, budgets):
        calls.append(len(contexts))
        return original(contexts, budgets)

    engine._sample_batch = counting
    contexts = [[1, 2, 3, 4, 5, 6, 7], [9, 8], [100, 200, 300, 400]]  # ragged: left padding

    async def main() -> list[GenResult]:
        return await asyncio.gather(*(engine.generate(c, max_new_tokens=n)
                                      for c, n in zip(contexts, [5, 3, 6], strict=True)))

    try:
        results = asyncio.run(main())
    finally:
        del engine._sample_batch
    assert calls == [3]  # three concurrent calls, one batched forward loop
    for ctx, res, budget in zip(contexts, results, [5, 3, 6], strict=True):
        assert res.policy_version == 0 and res.token_versions == []
        if res.finish_reason == "length":
            assert len(res.action_ids) == budget
        ref = _reference_logprobs(engine.model, ctx, res.action_ids, 1.0, 1.0)
        # fp32 cached, left-padded decode vs one unpadded forward: same math up to rounding.
        assert torch.allclose(torch.tensor(res.logprobs), ref, atol=2e-4), (res.logprobs, ref)


def test_logprobs_are_those_of_the_processed_distribution():
    eng = _engine(temperature=0.7, top_p=0.9)
    res = asyncio.run(eng.generate([5, 6, 7, 8], max_new_tokens=6))
    ref = _reference_logprobs(eng.model, [5, 6, 7, 8], res.action_ids, 0.7, 0.9)
    assert torch.allclose(torch.tensor(res.logprobs), ref, atol=2e-4)
    raw = _reference_logprobs(eng.model, [5, 6, 7, 8], res.action_ids, 1.0, 1.0)
    assert not torch.allclose(ref, raw, atol=1e-3)  # the processing really changed them


def test_load_weights_bumps_version_and_changes_the_policy(engine):
    new = {k: v * 1.5 for k, v in engine.model.state_dict().items()}

    async def main() -> GenResult:
        await engine.load_weights(7, new)
        return await engine.generate([11, 12, 13], max_new_tokens=4)

    res = asyncio.run(main())
    assert engine.version == 7 and res.policy_version == 7
    ref = _reference_logprobs(engine.model, [11, 12, 13], res.action_ids, 1.0, 1.0)
    assert torch.allclose(torch.tensor(res.logprobs), ref, atol=2e-4)
    assert torch.equal(engine.model.state_dict()["model.norm.weight"], new["model.norm.weight"])


def test_load_weights_rejects_a_foreign_state_dict(engine):
    with pytest.raises(ValueError, match=r"missing \['model.embed_tokens.weight'"):
        asyncio.run(engine.load_weights(1, {"bogus.weight": torch.zeros(2)}))


def test_eos_and_stop_strings_end_an_action(engine):
    eos = engine.eos_ids[0]
    row = _Row(budget=5)
    engine._append(row, 42, -1.0)
    engine._append(row, eos, -0.5)
    assert row.finish == "stop" and row.ids == [42, eos]  # eos is kept: it is the decision to stop
    row = _Row(budget=2)
    engine._append(row, 42, -1.0)
    engine._append(row, 43, -1.0)
    assert row.finish == "length"


def test_budget_is_capped_by_model_length():
    s = SamplingSettings(max_new_tokens=10)
    assert s.budget(None, 250, 256) == 6  # 256 - 250 tokens of room
    assert s.budget(3, 10, 256) == 3
    with pytest.raises(Exception, match="no room"):
        s.budget(None, 256, 256)


def test_compact_versions():
    assert compact_versions([3, 3, 3], 0) == (3, [])
    assert compact_versions([3, 4, 4], 0) == (3, [3, 4, 4])
    assert compact_versions([], 5) == (5, [])

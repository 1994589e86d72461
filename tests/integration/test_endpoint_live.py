"""The endpoint in front of a real engine (transformers, the tiny model) over loopback HTTP:
token-in/token-out answers exactly the ids the engine sampled, with the log-probs the learner
computes for them under the sampling distribution and the policy version of every token;
tokens sampled after a weight update carry the new version. The request and response are
vLLM's own shapes: a request built with vLLM's `GenerateRequest` is served, and vLLM's
`GenerateTokensResponse` validates the response."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from agent_r1_async.actors.engines.base import GenResult, SamplingSettings
from agent_r1_async.actors.engines.hf import HFEngine
from agent_r1_async.config import EngineConfig
from agent_r1_async.models import load_causal_lm, load_tokenizer, tiny_model_dir
from agent_r1_async.sampling import process_logits
from tests.unit.actors.endpoint.serving import make_service, post, serving

TEMPERATURE, TOP_P, MAX_NEW = 0.8, 0.9, 12


class Recording:
    """The engine, keeping every (context, result) it produced."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.sampled: list[tuple[list[int], GenResult]] = []

    @property
    def version(self) -> int:
        return self.engine.version

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None
                       ) -> GenResult:
        gen = await self.engine.generate(context_ids, max_new_tokens)
        self.sampled.append((list(context_ids), gen))
        return gen

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        await self.engine.load_weights(version, state_dict)

    async def close(self) -> None:
        await self.engine.close()


def learner_logprobs(model: Any, context: list[int], action: list[int]) -> list[float]:
    """Each action token's log-prob as the learner scores it: one forward, temperature then
    top-p (agent_r1_async.sampling), log-softmax."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context + action])).logits[0]
    pred = logits[len(context) - 1: len(context) - 1 + len(action)]
    logp = torch.log_softmax(process_logits(pred, TEMPERATURE, TOP_P), dim=-1)
    return logp.gather(-1, torch.tensor(action)[:, None])[:, 0].tolist()


def test_token_in_token_out_answers_what_the_engine_sampled_with_versions():
    path = tiny_model_dir()
    tok = load_tokenizer(path)
    model = load_causal_lm(path).eval()
    cfg = EngineConfig(backend="hf", dtype="float32", max_new_tokens=MAX_NEW,
                       temperature=TEMPERATURE, top_p=TOP_P)
    engine = Recording(HFEngine(cfg, path, SamplingSettings.from_config(cfg, seed=3), 512))
    service = make_service(engine, tok, temperature=TEMPERATURE, top_p=TOP_P,
                           max_new_tokens=MAX_NEW)
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}], tokenize=True,
                                            add_generation_prompt=True, return_dict=False))
               for q in ("What is 12 times 7?", "Name a river.")]
    new_weights = {k: v * 1.25 for k, v in model.state_dict().items()}

    async def run() -> list[dict[str, Any]]:
        bodies = []
        async with serving(service) as (endpoint, http):
            url = f"{endpoint.url}/inference/v1/generate"
            for version, prompt in ((0, prompts[0]), (0, prompts[1]), (1, prompts[0])):
                if version == 1 and engine.version == 0:
                    await engine.load_weights(1, new_weights)
                status, body = await post(http, url, {
                    "token_ids": prompt, "return_token_ids": True, "sampling_params": {
                        "max_tokens": MAX_NEW, "temperature": TEMPERATURE, "top_p": TOP_P,
                        "logprobs": 0}})
                assert status == 200, body
                bodies.append(body)
        await engine.close()
        return bodies

    bodies = asyncio.run(run())
    assert len(engine.sampled) == 3
    for i, (body, (context, gen)) in enumerate(zip(bodies, engine.sampled, strict=True)):
        version = 1 if i == 2 else 0
        choice, ext = body["choices"][0], body["agent_r1"]
        n = len(gen.action_ids)
        assert context == prompts[i % 2] == body["prompt_token_ids"] == ext["prompt_token_ids"]
        assert choice["token_ids"] == ext["token_ids"] == gen.action_ids and n > 0
        assert [c["token_id"] for c in choice["logprobs"]["content"]] == gen.action_ids
        assert [c["logprob"] for c in choice["logprobs"]["content"]] == ext["logprobs"] == \
            gen.logprobs
        assert ext["token_versions"] == [version] * n and ext["policy_version"] == version
        assert choice["weight_versions"] == [{"version": str(version), "start": 0, "end": n}]
        assert choice["finish_reason"] == gen.finish_reason
        assert body["usage"] == {"prompt_tokens": len(context), "completion_tokens": n,
                                 "total_tokens": len(context) + n}
    # The log-probs are the learner's, under the sampling distribution, for the weights that
    # sampled them (the first two: the initial weights).
    for (context, gen) in engine.sampled[:2]:
        assert gen.logprobs == pytest.approx(learner_logprobs(model, context, gen.action_ids),
                                             abs=1e-4)
    model.load_state_dict(new_weights)
    context, gen = engine.sampled[2]
    assert gen.logprobs == pytest.approx(learner_logprobs(model, context, gen.action_ids),
                                         abs=1e-4)


def test_the_shapes_are_vllms_own():
    """A request vLLM's `GenerateRequest` builds is served; vLLM's `GenerateTokensResponse`
    validates the answer, its weight-version spans included."""
    protocol = pytest.importorskip("vllm.entrypoints.scale_out.token_in_token_out.protocol")
    from vllm.sampling_params import SamplingParams

    from tests.fakes.engine import FakeEngine

    tok = load_tokenizer(tiny_model_dir())
    engine = FakeEngine.repeating([17, 18, 2])
    engine.version = 4
    service = make_service(engine, tok, max_new_tokens=8)
    request = protocol.GenerateRequest(
        token_ids=[1, 5, 9], return_token_ids=True,
        sampling_params=SamplingParams(max_tokens=8, temperature=1.0, logprobs=0),
    ).model_dump(mode="json")

    async def run() -> dict[str, Any]:
        async with serving(service) as (endpoint, http):
            status, body = await post(http, f"{endpoint.url}/inference/v1/generate", request)
            assert status == 200, body
            return body

    body = asyncio.run(run())
    parsed = protocol.GenerateTokensResponse.model_validate(body)
    (choice,) = parsed.choices
    assert parsed.request_id == request["request_id"] and parsed.prompt_token_ids == [1, 5, 9]
    assert choice.token_ids == [17, 18, 2] and engine.calls == [([1, 5, 9], 8)]
    assert [(c.token_id, c.logprob) for c in choice.logprobs.content] == [
        (17, -0.5), (18, -0.5), (2, -0.5)]
    assert [(s.version, s.start, s.end) for s in choice.weight_versions] == [("4", 0, 3)]
    assert body["agent_r1"]["token_versions"] == [4, 4, 4]

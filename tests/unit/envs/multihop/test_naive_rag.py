"""Naive RAG baseline (envs/multihop/naive_rag.py, `eval --baseline naive_rag`): the prompt
holds exactly the passages BM25 ranks for the question; EM/F1 of scripted answers by hand."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.multihop.env import MultihopArgs, MultihopDomain
from agent_r1_async.envs.multihop.naive_rag import RAG_SYSTEM_PROMPT, NaiveRAGEnv, lenient_answer
from agent_r1_async.envs.multihop.search import BM25Index
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.evaluate import evaluate
from tests.fakes.engine import FakeEngine

CORPUS = [
    {"id": "c1", "title": "Veltrania", "text": "Veltrania is a country. Its capital is Ostrum."},
    {"id": "c2", "title": "Ostrum",
     "text": "Ostrum is a city in Veltrania. The Kell River flows through Ostrum."},
    {"id": "c3", "title": "Brask", "text": "Brask is a city in Dornia."},
    {"id": "c4", "title": "Dornia", "text": "Dornia is a country. Its capital is Brask."},
]
TASK = Task("q", "Which river flows through the capital of Veltrania?", ["Kell River"])


def _rag(k: int) -> NaiveRAGEnv:
    index = BM25Index(CORPUS)
    return NaiveRAGEnv(index, MultihopDomain(index, MultihopArgs()), k)


def test_prompt_holds_the_bm25_top_k():
    # Query terms (stopwords gone): river, flows, capital, veltrania. N=4 documents;
    # idf(river) = idf(flows) = ln(1 + 3.5/1.5) = 1.20 (1 doc), idf(veltrania) = idf(capital)
    # = ln(2) = 0.69 (2 docs). c2 matches veltrania + river + flows (~3.1), c1 veltrania (x3,
    # saturating) + capital (~1.8), c4 capital only (~0.7), c3 nothing (score 0: never shown).
    obs = asyncio.run(_rag(2).reset(TASK))
    assert obs.tools == []
    assert obs.messages[0] == {"role": "system", "content": RAG_SYSTEM_PROMPT}
    assert obs.messages[1]["content"] == (
        "Passages:\n"
        "(1) Ostrum: Ostrum is a city in Veltrania. The Kell River flows through Ostrum.\n"
        "(2) Veltrania: Veltrania is a country. Its capital is Ostrum.\n\n"
        f"Question: {TASK.prompt}"
    )
    many = asyncio.run(_rag(10).reset(TASK)).messages[1]["content"]
    assert "(3) Dornia:" in many and "Brask is a city" not in many and "(4)" not in many


@pytest.mark.parametrize(("action", "em", "f1", "fmt"), [
    ("<answer>Kell River</answer>", 1.0, 1.0, 1.0),
    ("<answer>the kell river.</answer>", 1.0, 1.0, 1.0),  # SQuAD normalization
    ("The Kell\nbecause ...", 0.0, 2 / 3, 0.0),  # no tags: first line; P=1, R=1/2 -> F1 2/3
    ("<answer>Ostrum</answer>", 0.0, 0.0, 1.0),
    ("", 0.0, 0.0, 0.0),
])
def test_one_turn_scored_by_the_env(action, em, f1, fmt):
    env = _rag(2)

    async def episode():
        await env.reset(TASK)
        return await env.step(action)

    r = asyncio.run(episode())
    assert r.done and r.outcome_reward == em  # outcome: em (MultihopArgs default)
    assert r.metrics["em"] == em and r.metrics["f1"] == pytest.approx(f1)
    assert r.metrics["format_ok"] == fmt and r.metrics["tool_calls"] == 0.0


def test_lenient_answer():
    assert lenient_answer("\n  Kell River \nmore") == "Kell River"
    assert lenient_answer("x <answer> A </answer>") == "A"  # extract_answer strips
    assert lenient_answer("  \n ") is None


def test_evaluate_naive_rag_end_to_end(tmp_path):
    cfg = config_from_dict({
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 1024},
        "env": {"name": "multihop_qa", "max_turns": 4,
                "args": {"cache_dir": str(tmp_path), "top_k": 2}},
    })
    spec = get_env_spec(cfg.env)
    tasks = spec.tasks("dev")[:4]
    # tasks 0 and 2 answered right, 1 and 3 wrong -> EM 0.5
    answers = {t.prompt: [f"<answer>{t.answer[0] if i % 2 == 0 else 'Nobody'}</answer>"]
               for i, t in enumerate(tasks)}
    tok = load_tokenizer(tiny_model_dir())
    engine = FakeEngine.by_turn(tok, answers)
    result = evaluate(cfg, "dev", 4, engine=engine, baseline="naive_rag", rag_k=3)
    assert result["episodes"] == 4.0 and result["em"] == 0.5 and result["f1"] == 0.5
    assert result["mean_steps"] == 1.0 and len(engine.calls) == 4
    index = spec.definition.index
    texts = [tok.decode(ctx) for ctx, _ in engine.calls]
    for task in tasks:
        (text,) = [t for t in texts if f"Question: {task.prompt}" in t]
        assert "<tool_call>" not in text  # no tool prompt
        top = index.search(task.prompt, 3)
        assert [f"({i}) {p['title']}: {p['text']}" in text for i, p in enumerate(top, 1)] == [
            True] * 3
        assert "(4) " not in text
    with pytest.raises(ValueError, match="no BM25"):
        arith = config_from_dict({"model": {"name_or_path": tiny_model_dir()},
                                  "env": {"name": "arithmetic"}})
        evaluate(arith, "dev", 1, engine=engine, baseline="naive_rag")

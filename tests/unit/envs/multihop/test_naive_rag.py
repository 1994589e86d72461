"""Naive RAG baseline (envs/multihop/naive_rag.py, `eval --baseline naive_rag`): the prompt
holds exactly the passages BM25 ranks for the question; EM/F1 of scripted answers by hand;
retrieval recall@k on a hand-built corpus."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.multihop.env import MultihopArgs, MultihopDomain
from agent_r1_async.envs.multihop.naive_rag import (
    RAG_SYSTEM_PROMPT,
    NaiveRAGEnv,
    RetrievalRecall,
    format_recall_table,
    has_all_support,
    lenient_answer,
    main,
    passage_has_answer,
    rag_transcript,
    retrieval_recall,
)
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


@pytest.mark.parametrize(("action", "em", "f1", "fmt", "inside"), [
    ("<answer>Kell River</answer>", 1.0, 1.0, 1.0, 1.0),
    ("<answer>the kell river.</answer>", 1.0, 1.0, 1.0, 1.0),  # SQuAD normalization
    ("The Kell\nbecause ...", 0.0, 2 / 3, 0.0, 0.0),  # no tags: first line; P=1, R=1/2 -> F1 2/3
    ("It is Ostrum.\nThe Kell River, I think", 0.0, 0.0, 0.0, 1.0),  # right, past line one
    ("<answer>Ostrum</answer>", 0.0, 0.0, 1.0, 0.0),
    ("", 0.0, 0.0, 0.0, 0.0),
])
def test_one_turn_scored_by_the_env(action, em, f1, fmt, inside):
    env = _rag(2)

    async def episode():
        await env.reset(TASK)
        return await env.step(action)

    r = asyncio.run(episode())
    assert r.done and r.outcome_reward == em  # outcome: em (MultihopArgs default)
    assert r.metrics["em"] == em and r.metrics["f1"] == pytest.approx(f1)
    assert r.metrics["format_ok"] == fmt and r.metrics["tool_calls"] == 0.0
    assert r.metrics["answer_in_output"] == inside


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


RECALL_CORPUS = [
    {"id": "r1", "title": "Veltrania",
     "text": "Veltrania is a country founded in 1204. The capital is Ostrum."},
    {"id": "r2", "title": "Ostrum",
     "text": "Ostrum is a city in Veltrania. The Kell River flows by Ostrum."},
    {"id": "r3", "title": "Dornia", "text": "Dornia is a country. The capital is Brask."},
]


def _task(qid: str, question: str, answers: list[str], support: list[str]) -> Task:
    return Task(qid, question, answers, {"supporting_ids": support, "supporting_titles": []})


RECALL_TASKS = [
    _task("t1", "Which river flows through the capital of Veltrania?", ["Kell River", "Kell"],
          ["r1", "r2"]),
    _task("t2", "In what year was Veltrania founded?", ["1204"], ["r1"]),
    _task("t3", "In what year was the country of the Kell River founded?", ["1204"],
          ["r2", "r1"]),
    _task("t4", "Who is the mayor of Brask?", ["Tal Venn"], ["r3", "r9"]),  # r9: not in corpus
]


def test_retrieval_recall_at_k_by_hand():
    # Indexed "title. text" minus stopwords (the question words which/what/through/who are
    # kept but occur in no passage, so they score nothing): r1 = veltrania x2, country, founded, 1204, capital,
    # ostrum (7 terms); r2 = ostrum x3, city, veltrania, kell, river, flows (8); r3 = dornia x2,
    # country, capital, brask (5); avgdl 20/3. BM25 (bm25s "lucene", k1 1.5, b 0.75): idf =
    # ln(1 + (3 - df + .5) / (df + .5)) = 0.98 (df 1), 0.47 (df 2); a term scores
    # idf * tf / (tf + L), L = 1.5 * (.25 + .75 * dl / avgdl) = 1.556 (r1), 1.725 (r2), 1.219 (r3).
    # t1: r2 river .36 + flows .36 + veltrania .17 = .89 > r1 veltrania(x2) .26 + capital .18
    #     = .45 > r3 capital .21: answer in r2 from k=1, both gold passages from k=2.
    # t2: r1 veltrania .26 + founded .38 = .65 > r2 .17 (r3 shares no term): 1204 and r1 at k=1.
    # t3: r2 kell .36 + river .36 = .72 > r1 country .18 + founded .38 = .57 > r3 .21: 1204 is
    #     only in r1, so answer and both passages from k=2.
    # t4: r3 only; "Tal Venn" is nowhere and r9 is not in the corpus: never.
    index = BM25Index(RECALL_CORPUS)
    assert [p["id"] for p in index.search(RECALL_TASKS[0].prompt, 3)] == ["r2", "r1", "r3"]
    assert [p["id"] for p in index.search(RECALL_TASKS[2].prompt, 3)] == ["r2", "r1", "r3"]
    got = [retrieval_recall(index, RECALL_TASKS, k) for k in (1, 2, 3)]
    assert got == [RetrievalRecall(1, 4, 2 / 4, 1 / 4), RetrievalRecall(2, 4, 3 / 4, 3 / 4),
                   RetrievalRecall(3, 4, 3 / 4, 3 / 4)]
    assert format_recall_table(got[:1]).splitlines()[-1] == "| 1 | 0.500 | 0.250 |"
    with pytest.raises(ValueError, match="no tasks"):
        retrieval_recall(index, [], 2)


def test_answer_match_is_normalized_and_whole_words():
    passage = {"id": "r2", "title": "Ostrum", "text": "The Kell River flows by Ostrum in 1204."}
    assert passage_has_answer(passage, ["Kell River"])
    assert passage_has_answer(passage, ["nobody", "the kell river."])  # SQuAD normalization
    assert passage_has_answer(passage, ["Ostrum"]) and passage_has_answer(passage, ["1204"])
    assert not passage_has_answer(passage, ["Kel"]) and not passage_has_answer(passage, ["120"])
    assert not passage_has_answer(passage, ["the", ""])  # empty once normalized


def test_support_matches_ids_or_titles():
    shown = RECALL_CORPUS[:2]
    assert has_all_support(shown, _task("a", "q", ["x"], ["r1", "r2"]))
    assert not has_all_support(shown, _task("b", "q", ["x"], ["r1", "r3"]))
    by_title = Task("c", "q", ["x"], {"supporting_ids": [], "supporting_titles": ["Ostrum"]})
    assert has_all_support(shown, by_title)
    assert not has_all_support(shown, Task("d", "q", ["x"], {}))  # no gold listed: a miss


def test_reader_demonstration_is_the_baseline_prompt_then_the_gold_answer():
    index = BM25Index(CORPUS)
    demo = rag_transcript(index, TASK, 2)
    prompt = asyncio.run(_rag(2).reset(TASK)).messages
    assert demo["messages"][:2] == prompt
    assert demo["messages"][2] == {"role": "assistant", "content": "<answer>Kell River</answer>"}


def test_reader_demos_follow_the_warm_starts_task_order(tmp_path):
    from agent_r1_async.envs.multihop import loaders
    from agent_r1_async.envs.multihop.env import SHIPPED_DIR
    from agent_r1_async.sft.train import demo_tasks

    out = tmp_path / "rag.jsonl"
    main(["--demos-out", str(out), "--num-demos", "3", "--seed", "5", "--k", "4"])
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    train = demo_tasks(loaders.load_tasks("flashrag", SHIPPED_DIR / "train.jsonl"), 5, 0)[:3]
    assert [x["messages"][1]["content"].split("Question: ")[1] for x in lines] == [
        t.prompt for t in train]
    assert [x["messages"][2]["content"] for x in lines] == [
        f"<answer>{t.answer[0]}</answer>" for t in train]
    assert all(x["messages"][1]["content"].count("\n(") == 4 for x in lines)  # (1) .. (4)
    with pytest.raises(SystemExit, match="one --k"):
        main(["--demos-out", str(out), "--k", "2", "4"])

"""Multi-hop QA: generator determinism, shipped data, BM25 retrieval + cache, loaders, episodes."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.multihop import generator
from agent_r1_async.envs.multihop.env import SHIPPED_DIR
from agent_r1_async.envs.multihop.loaders import corpus_from_records, load_corpus, load_tasks
from agent_r1_async.envs.multihop.search import BM25Index
from agent_r1_async.envs.registry import get_env_spec


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bm25")
    return get_env_spec(EnvConfig(name="multihop_qa", max_turns=4, args={"cache_dir": str(cache)}))


def test_generator_is_deterministic_and_shipped_files_match():
    a, b = generator.generate(), generator.generate()
    assert a == b
    for name, records in a.items():
        shipped = (SHIPPED_DIR / f"{name}.jsonl").read_text(encoding="utf-8")
        assert shipped == generator.dump_jsonl(records), f"{name}.jsonl differs from a regeneration"
    assert generator.generate(seed=7)["dev"] != a["dev"]
    total = sum(p.stat().st_size for p in SHIPPED_DIR.glob("*.jsonl"))
    assert total < 2_000_000


def test_splits_are_disjoint_by_first_entity_and_supported():
    data = generator.generate()
    ids = {p["id"] for p in data["corpus"]}
    roots = {
        s: {r["metadata"]["supporting_ids"][0] for r in data[s]} for s in ("train", "dev", "test")
    }
    assert not roots["train"] & roots["dev"] and not roots["train"] & roots["test"]
    assert not roots["dev"] & roots["test"]
    assert len(data["dev"]) >= 100 and len(data["test"]) >= 100 and len(data["train"]) >= 1000
    for s in ("train", "dev", "test"):
        for r in data[s]:
            assert (
                len(r["metadata"]["supporting_ids"]) == 2
                and set(r["metadata"]["supporting_ids"]) <= ids
            )


def test_a_generated_question_reads_as_two_hops():
    w = generator.build_world()
    country = w.countries[0]
    capital = w.cities[country["capital"]]
    assert capital["split"] == country["split"] and capital["country"] == 0
    q = next(
        q
        for q in generator.questions(w)
        if q["type"] == "capital_river" and q["root"] == "country-0"
    )
    assert q["question"] == f"Which river flows through the capital of {country['name']}?"
    assert q["golden_answers"] == [capital["river"], capital["river"].removesuffix(" River")]
    texts = {p["id"]: p["text"] for p in generator.passages(w)}
    assert f"Its capital is {capital['name']}." in texts["country-0"]
    assert f"The {capital['river']} flows through {capital['name']}." in texts[capital["id"]]


def test_bm25_finds_gold_passage_for_every_hop(spec):
    index = spec.definition.index
    for task in spec.tasks("dev")[:40]:  # all splits: 100% (measured), 40 keep the test fast
        for hop in task.meta["hops"]:
            found = [p["id"] for p in index.search(hop["query"], 3)]
            assert hop["id"] in found, (task.prompt, hop)
        # the question itself already retrieves its first-hop passage
        assert task.meta["hops"][0]["id"] in [p["id"] for p in index.search(task.prompt, 3)]
    assert index.search("the of and", 3) == []  # stopwords only: no terms, no hits


def test_index_cache_is_reused_and_keyed_by_corpus(tmp_path):
    corpus = [
        {"id": "a", "title": "Ostrum", "text": "The Kell River flows through Ostrum."},
        {"id": "b", "title": "Veltrania", "text": "Its capital is Ostrum."},
    ]
    first = BM25Index(corpus, tmp_path)
    second = BM25Index(corpus, tmp_path)
    assert not first.loaded_from_cache and second.loaded_from_cache
    assert [p["id"] for p in second.search("Kell river", 2)] == ["a"]
    changed = BM25Index([*corpus, {"id": "c", "title": "X", "text": "y z"}], tmp_path)
    assert not changed.loaded_from_cache and changed.key != first.key
    assert len(list((tmp_path / "bm25").iterdir())) == 2


def test_oracle_episode_rewards(spec):
    task = next(t for t in spec.tasks("dev") if t.meta["type"] == "birth_river")
    actions = spec.oracle(task)
    assert len(actions) == 3 and actions[-1] == f"<answer>{task.answer[0]}</answer>"

    async def episode():
        env = spec.make()
        await env.reset(task)
        return [await env.step(a) for a in actions]

    r1, r2, r3 = asyncio.run(episode())
    # step 1: first well-formed call 0.05 + person passage (gold) 0.1; step 2: city passage 0.1
    # (the person passage, seen again, pays nothing)
    assert r1.reward == pytest.approx(0.15) and r2.reward == pytest.approx(0.1)
    assert task.answer[0].removesuffix(" River") in r2.observation.messages[0]["content"]
    assert (
        r3.done and r3.outcome_reward == 1.0 and r3.metrics["em"] == 1.0 and r3.metrics["f1"] == 1.0
    )


def test_f1_outcome_and_partial_answer(tmp_path):
    spec = get_env_spec(
        EnvConfig(name="multihop_qa", args={"outcome": "f1", "cache_dir": str(tmp_path)})
    )
    task = next(t for t in spec.tasks("test") if t.meta["type"] == "capital_mayor")  # "First Last"

    async def episode():
        env = spec.make()
        await env.reset(task)
        return await env.step(f"<answer>{task.answer[0].split()[0]} Smith</answer>")

    r = asyncio.run(episode())
    # one of two tokens right: P = R = 1/2 -> F1 = 0.5; EM 0
    assert r.outcome_reward == pytest.approx(0.5) and r.metrics["em"] == 0.0


HOTPOT = [
    {
        "_id": "h1",
        "question": "Which river flows through the capital of Veltrania?",
        "answer": "Kell",
        "type": "bridge",
        "supporting_facts": [["Veltrania", 0], ["Ostrum", 1]],
        "context": [
            ["Veltrania", ["Veltrania is a land.", " Its capital is Ostrum."]],
            ["Ostrum", ["Ostrum is old.", " The Kell flows there."]],
            ["Brisk", ["Brisk is a town."]],
        ],
    }
]


def test_hotpot_loader_and_env_on_local_files(tmp_path):
    (tmp_path / "dev.json").write_text(json.dumps(HOTPOT))
    tasks = load_tasks("hotpotqa", tmp_path / "dev.json")
    assert tasks[0].task_id == "h1" and tasks[0].answer == ["Kell"]
    assert tasks[0].meta["supporting_titles"] == ["Veltrania", "Ostrum"]
    corpus = corpus_from_records("hotpotqa", [tmp_path / "dev.json"])
    assert [p["id"] for p in corpus] == ["Brisk", "Ostrum", "Veltrania"]
    assert corpus[2]["text"] == "Veltrania is a land. Its capital is Ostrum."
    spec = get_env_spec(
        EnvConfig(
            name="multihop_qa",
            args={"dataset": "2wiki", "data_dir": str(tmp_path), "cache_dir": str(tmp_path / "c")},
        )
    )
    assert spec.oracle(spec.tasks("dev")[0]) == [
        '<tool_call>{"name": "search", "arguments": {"query": "Veltrania"}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": {"query": "Ostrum"}}</tool_call>',
        "<answer>Kell</answer>",
    ]


def test_musique_and_flashrag_loaders(tmp_path):
    musique = {
        "id": "m1",
        "question": "Q?",
        "answer": "Kell",
        "answer_aliases": ["Kell River"],
        "paragraphs": [
            {"idx": 0, "title": "Ostrum", "paragraph_text": "Kell flows.", "is_supporting": True},
            {"idx": 1, "title": "Brisk", "paragraph_text": "Town.", "is_supporting": False},
        ],
    }
    (tmp_path / "m.jsonl").write_text(json.dumps(musique) + "\n")
    (t,) = load_tasks("musique", tmp_path / "m.jsonl")
    assert t.answer == ["Kell", "Kell River"] and t.meta["supporting_ids"] == ["Ostrum"]
    assert [p["id"] for p in corpus_from_records("musique", [tmp_path / "m.jsonl"])] == [
        "Brisk",
        "Ostrum",
    ]
    (tmp_path / "f.jsonl").write_text(
        json.dumps({"id": "f1", "question": "Q?", "golden_answers": ["A", "B"]}) + "\n"
    )
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"id": "7", "contents": '"Ostrum"\nKell flows.'}) + "\n"
    )
    (f,) = load_tasks("flashrag", tmp_path / "f.jsonl")
    assert f.answer == ["A", "B"] and f.meta["supporting_ids"] == []
    assert load_corpus(tmp_path / "corpus.jsonl") == [
        {"id": "7", "title": "Ostrum", "text": "Kell flows."}
    ]
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        load_tasks("flashrag", tmp_path / "bad.jsonl")


def test_unknown_split_names_the_split(spec):
    with pytest.raises(ValueError, match="no file for split 'validation'"):
        spec.tasks("validation")


def test_concurrent_oracle_episodes_share_one_index(spec):
    tasks = spec.tasks("dev")[:20]

    async def episode(task):
        env = spec.make()
        await env.reset(task)
        return [await env.step(a) for a in spec.oracle(task)][-1]

    async def all_of_them():
        return await asyncio.gather(*(episode(t) for t in tasks))

    results = asyncio.run(all_of_them())
    assert [r.outcome_reward for r in results] == [1.0] * 20


def test_env_reports_the_shipped_corpus_version(spec):
    assert spec.definition.corpus_version == generator.CORPUS_VERSION == "2"

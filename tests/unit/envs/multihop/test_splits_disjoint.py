"""The shipped synthetic splits share no entity on any hop and no (bridge, answer) pair, and
the shipped files are exactly what the generator writes now.

Entities are read off the shipped files through the project's loaders, not off the generator:
a question's hop entities are its supporting passages (first hop, bridge) plus the passage
whose title is a gold answer, when the answer names an entity (a mayor, a country).
"""

from __future__ import annotations

import re
from itertools import combinations

import pytest

from agent_r1_async.envs.base import Task
from agent_r1_async.envs.multihop import generator
from agent_r1_async.envs.multihop.env import SHIPPED_DIR
from agent_r1_async.envs.multihop.loaders import (
    Passage,
    corpus_version,
    load_corpus,
    load_tasks,
)

SPLITS = ("train", "dev", "test")
PAIRS = list(combinations(SPLITS, 2))


@pytest.fixture(scope="module")
def corpus() -> list[Passage]:
    return load_corpus(SHIPPED_DIR / "corpus.jsonl")


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[Task]]:
    return {s: load_tasks("flashrag", SHIPPED_DIR / f"{s}.jsonl") for s in SPLITS}


def id_of_title(corpus: list[Passage]) -> dict[str, str]:
    return {p["title"]: p["id"] for p in corpus}


def hop_entities(task: Task, ids: dict[str, str]) -> set[str]:
    """Corpus ids of the first-hop and bridge passages and of the answer, if it is an entity."""
    return set(task.meta["supporting_ids"]) | {ids[a] for a in task.answer if a in ids}


def split_entities(tasks: list[Task], ids: dict[str, str]) -> set[str]:
    return set().union(*(hop_entities(t, ids) for t in tasks))


def bridge_answer_pairs(tasks: list[Task]) -> set[tuple[str, str]]:
    """(bridge passage id, gold answer) of every question, every answer alias."""
    return {(t.meta["supporting_ids"][1], a) for t in tasks for a in t.answer}


def test_shipped_splits_are_two_hop_and_name_answer_entities(tasks, corpus):
    ids = id_of_title(corpus)
    assert {s: len(t) for s, t in tasks.items()} == {"train": 1152, "dev": 143, "test": 145}
    corpus_ids = {p["id"] for p in corpus}
    for split in SPLITS:
        for t in tasks[split]:
            first, bridge = t.meta["supporting_ids"]
            assert first != bridge and {first, bridge} <= corpus_ids, t.task_id
        # the answer-entity part of the check is not vacuous: mayors and countries are titles
        assert sum(any(a in ids for a in t.answer) for t in tasks[split]) > 0, split


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_splits_share_no_hop_entity(tasks, corpus, a, b):
    ids = id_of_title(corpus)
    shared = split_entities(tasks[a], ids) & split_entities(tasks[b], ids)
    assert not shared, f"{a}/{b} share {len(shared)} hop entities, e.g. {sorted(shared)[:5]}"


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_splits_share_no_bridge_answer_pair(tasks, a, b):
    shared = bridge_answer_pairs(tasks[a]) & bridge_answer_pairs(tasks[b])
    assert not shared, f"{a}/{b} share {len(shared)} (bridge, answer) pairs: {sorted(shared)[:5]}"


@pytest.mark.parametrize("held_out", ["dev", "test"])
def test_held_out_gold_passages_mention_no_train_entity(tasks, corpus, held_out):
    """Stronger than the hop check: no entity a held-out question's supporting passages name
    (a city's country and mayor, a company's founder...) is a hop entity of a train question."""
    ids = id_of_title(corpus)
    by_id = {p["id"]: p for p in corpus}
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(ids, key=len, reverse=True)))
                       + r")\b")
    gold = {i for t in tasks[held_out] for i in t.meta["supporting_ids"]}
    mentioned = {ids[m] for i in gold for m in names.findall(by_id[i]["text"])}
    assert len(mentioned) > len(gold) // 2  # the passages do name other entities
    shared = mentioned & split_entities(tasks["train"], ids)
    assert not shared, f"{held_out} passages name {len(shared)} train entities"


def test_shipped_files_equal_a_fresh_generation(tmp_path):
    counts = generator.write_dataset(tmp_path)
    assert counts == {"corpus": 980, "train": 1152, "dev": 143, "test": 145}
    shipped = sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_file())
    assert shipped == sorted(p.name for p in tmp_path.iterdir())
    for name in shipped:
        assert (SHIPPED_DIR / name).read_bytes() == (tmp_path / name).read_bytes(), name
    assert (SHIPPED_DIR / "VERSION").read_text(encoding="utf-8") == generator.CORPUS_VERSION + "\n"
    assert corpus_version(SHIPPED_DIR) == generator.CORPUS_VERSION == "2"
    assert corpus_version(tmp_path / "nowhere") == ""

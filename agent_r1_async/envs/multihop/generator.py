"""Deterministic synthetic multi-hop QA: fictional countries, cities, people and companies.

Every name is built from random syllables, so no answer can be memorized from pretraining:
the agent has to search. Each entity gets one short passage stating its facts; every question
is a 2-hop bridge question whose two supporting passages are both needed, e.g.
  "Veltrania ... Its capital is Ostrum."  +  "Ostrum ... The Kell River flows through Ostrum."
  -> "Which river flows through the capital of Veltrania?"  (answer: Kell River)
Splits are disjoint by the question's first entity (a dev question never asks about an
entity a train question starts from), so the splits test searching, not recall.

`generate(seed)` is pure; `write_dataset(out_dir, seed)` writes FlashRAG-style JSONL
(`corpus.jsonl`, `train.jsonl`, `dev.jsonl`, `test.jsonl`); a test regenerates the shipped
files and compares them byte for byte.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SEED = 1234
SIZES = {"countries": 80, "cities": 300, "people": 500, "companies": 100}
SPLIT_FRACTIONS = {"dev": 0.1, "test": 0.1}  # the rest is train

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kl", "pr", "st", "tr", "vr", "th", "sk"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ou", "y"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "k", "x"]
_SUFFIX = {"country": ["ania", "ovia", "eria", "ostan", "undia"], "city": ["um", "ar", "eth", "is",
           "on", "ova"], "river": [""], "first": ["", "a", "o"], "last": ["", "en", "ak", "ir"],
           "company": ["ix", "ora", "tek", "on"]}
_PROFESSIONS = ["painter", "chemist", "architect", "sailor", "poet", "astronomer", "weaver",
                "engineer", "historian", "composer"]


@dataclass
class World:
    """All entities and facts; index lists refer into the entity lists."""

    countries: list[dict[str, Any]] = field(default_factory=list)
    cities: list[dict[str, Any]] = field(default_factory=list)
    people: list[dict[str, Any]] = field(default_factory=list)
    companies: list[dict[str, Any]] = field(default_factory=list)


class _Names:
    """Unique capitalized fictional words."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, kind: str, syllables: int) -> str:
        while True:
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables)]
            stem = "".join(parts) + self.rng.choice(_CODAS)
            w = (stem + self.rng.choice(_SUFFIX[kind])).capitalize()
            if w.lower() not in self.used and len(w) >= 4:
                self.used.add(w.lower())
                return w


def build_world(seed: int = DEFAULT_SEED) -> World:
    rng = random.Random(seed)
    names = _Names(rng)
    w = World()
    for i in range(SIZES["countries"]):
        w.countries.append({"id": f"country-{i}", "name": names.word("country", 2), "capital": i,
                            "founded": rng.randint(900, 1800)})
    for i in range(SIZES["cities"]):
        country = i if i < SIZES["countries"] else rng.randrange(SIZES["countries"])
        w.cities.append({"id": f"city-{i}", "name": names.word("city", rng.randint(1, 2)),
                         "country": country, "river": names.word("river", 1) + " River",
                         "mayor": i, "founded": rng.randint(1000, 1900)})
    for i in range(SIZES["people"]):
        first, last = names.word("first", 1), names.word("last", 2)
        w.people.append({"id": f"person-{i}", "name": f"{first} {last}",
                         "born_in": rng.randrange(SIZES["cities"]), "born": rng.randint(1900, 1995),
                         "profession": rng.choice(_PROFESSIONS)})
    for i in range(SIZES["companies"]):
        w.companies.append({"id": f"company-{i}", "name": names.word("company", 2),
                            "founder": rng.randrange(SIZES["people"]),
                            "hq": rng.randrange(SIZES["cities"]),
                            "founded": rng.randint(1850, 2015)})
    return w


def passages(w: World) -> list[dict[str, str]]:
    """One passage per entity: {"id", "title", "text"}."""
    out = []
    for c in w.countries:
        cap = w.cities[c["capital"]]["name"]
        out.append((c, f"{c['name']} is a country founded in {c['founded']}. "
                       f"Its capital is {cap}."))
    for c in w.cities:
        mayor = w.people[c["mayor"]]["name"]
        out.append((c, f"{c['name']} is a city in {w.countries[c['country']]['name']}, founded in "
                       f"{c['founded']}. The {c['river']} flows through {c['name']}. "
                       f"The mayor of {c['name']} is {mayor}."))
    for p in w.people:
        article = "an" if p["profession"][0] in "aeiou" else "a"
        out.append((p, f"{p['name']} is {article} {p['profession']}, born in {p['born']} in "
                       f"{w.cities[p['born_in']]['name']}."))
    for c in w.companies:
        out.append((c, f"{c['name']} is a company founded in {c['founded']} by "
                       f"{w.people[c['founder']]['name']}. It is headquartered in "
                       f"{w.cities[c['hq']]['name']}."))
    return [{"id": e["id"], "title": e["name"], "text": text} for e, text in out]


def _q(kind: str, root: dict, bridge: dict, question: str, answers: list[str],
       hop1: str, hop2: str) -> dict[str, Any]:
    return {"root": root["id"], "type": kind, "question": question, "golden_answers": answers,
            "supporting_ids": [root["id"], bridge["id"]],
            "supporting_titles": [root["name"], bridge["name"]],
            "hops": [{"query": hop1, "id": root["id"]}, {"query": hop2, "id": bridge["id"]}]}


def _river(city: dict) -> list[str]:
    return [city["river"], city["river"].removesuffix(" River")]


def questions(w: World) -> list[dict[str, Any]]:
    """All 2-hop bridge questions of the world (before the split)."""
    qs = []
    for c in w.countries:
        cap = w.cities[c["capital"]]
        n, cn = c["name"], cap["name"]
        qs.append(_q("capital_river", c, cap, f"Which river flows through the capital of {n}?",
                     _river(cap), f"capital of {n}", f"{cn} river"))
        qs.append(_q("capital_mayor", c, cap, f"Who is the mayor of the capital of {n}?",
                     [w.people[cap["mayor"]]["name"]], f"capital of {n}", f"mayor of {cn}"))
        qs.append(_q("capital_founded", c, cap, f"In what year was the capital of {n} founded?",
                     [str(cap["founded"])], f"capital of {n}", f"{cn} founded"))
    for p in w.people:
        city = w.cities[p["born_in"]]
        n, cn = p["name"], city["name"]
        country = w.countries[city["country"]]["name"]
        qs.append(_q("birth_country", p, city, f"In which country was {n} born?", [country],
                     f"{n} born", f"{cn} city country"))
        qs.append(_q("birth_river", p, city, f"Which river flows through the city where {n} was "
                     "born?", _river(city), f"{n} born", f"{cn} river"))
    for c in w.companies:
        f, hq = w.people[c["founder"]], w.cities[c["hq"]]
        n = c["name"]
        qs.append(_q("founder_born", c, f, f"In what year was the founder of {n} born?",
                     [str(f["born"])], f"{n} founded by", f"{f['name']} born"))
        qs.append(_q("hq_mayor", c, hq, f"Who is the mayor of the city where {n} is "
                     "headquartered?", [w.people[hq["mayor"]]["name"]], f"{n} headquartered",
                     f"mayor of {hq['name']}"))
    return qs


def split_questions(qs: list[dict[str, Any]], seed: int) -> dict[str, list[dict[str, Any]]]:
    """Assign each root entity (with all its questions) to one split; ids are stable."""
    roots = sorted({q["root"] for q in qs})
    random.Random(seed + 1).shuffle(roots)
    n_dev = round(len(roots) * SPLIT_FRACTIONS["dev"])
    n_test = round(len(roots) * SPLIT_FRACTIONS["test"])
    where = {r: "dev" for r in roots[:n_dev]}
    where.update({r: "test" for r in roots[n_dev:n_dev + n_test]})
    out: dict[str, list[dict[str, Any]]] = {"train": [], "dev": [], "test": []}
    for q in qs:
        out[where.get(q["root"], "train")].append(q)
    for split, items in out.items():
        random.Random(f"{seed}/{split}").shuffle(items)
    return out


def _task_record(split: str, i: int, q: dict[str, Any]) -> dict[str, Any]:
    meta = {k: q[k] for k in ("type", "supporting_ids", "supporting_titles", "hops")}
    return {"id": f"{split}-{i}", "question": q["question"], "golden_answers": q["golden_answers"],
            "metadata": meta}


def generate(seed: int = DEFAULT_SEED) -> dict[str, list[dict[str, Any]]]:
    """{"corpus": [...], "train": [...], "dev": [...], "test": [...]} as JSON-ready records."""
    w = build_world(seed)
    splits = split_questions(questions(w), seed)
    out: dict[str, list[dict[str, Any]]] = {"corpus": passages(w)}
    for split, qs in splits.items():
        out[split] = [_task_record(split, i, q) for i, q in enumerate(qs)]
    return out


def dump_jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)


def write_dataset(out_dir: str | Path, seed: int = DEFAULT_SEED) -> dict[str, int]:
    """Write `<name>.jsonl` for corpus/train/dev/test; returns record counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, records in generate(seed).items():
        (out / f"{name}.jsonl").write_text(dump_jsonl(records), encoding="utf-8")
        counts[name] = len(records)
    return counts

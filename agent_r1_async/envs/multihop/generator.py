"""Deterministic synthetic multi-hop QA: fictional countries, cities, people and companies.

Every name is built from random syllables, so no answer can be memorized from pretraining:
the agent has to search. Each entity gets one short passage stating its facts; every question
is a 2-hop bridge question whose two supporting passages are both needed, e.g.
  "Veltrania ... Its capital is Ostrum."  +  "Ostrum ... The Kell River flows through Ostrum."
  -> "Which river flows through the capital of Veltrania?"  (answer: Kell River)

The world is partitioned into three disjoint sub-worlds, one per split: every entity belongs to
one split, and every fact links entities of the same split (a dev country's capital, that
city's mayor, a dev person's birthplace, a dev company's founder and headquarters are all dev
entities). A question belongs to the split of its entities, so no entity (first hop, bridge or
answer) and no (bridge, answer) pair of a dev or test question occurs in any train question,
nor across dev and test: the splits test searching, not recall. The corpus holds the passages
of all splits, so the others are distractors to the search.

`generate(seed)` is pure; `write_dataset(out_dir, seed)` writes FlashRAG-style JSONL
(`corpus.jsonl`, `train.jsonl`, `dev.jsonl`, `test.jsonl`) and `VERSION` (`CORPUS_VERSION`);
`python scripts/make_multihop_data.py` regenerates the shipped files, and a test compares them
with a fresh generation byte for byte.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CORPUS_VERSION = "2"
"""Version of the generated data, written to `VERSION` beside the JSONL files. 1: splits
disjoint by the first-hop entity only; 2: the world partitioned per split (every hop)."""
DEFAULT_SEED = 1234
SIZES = {"countries": 80, "cities": 300, "people": 500, "companies": 100}
SPLITS = ("train", "dev", "test")
SPLIT_SIZES = {
    "dev": {"countries": 7, "cities": 30, "people": 51, "companies": 10},
    "test": {"countries": 9, "cities": 30, "people": 49, "companies": 10},
}
"""Entities of each held-out split (train: the rest of SIZES). A country asks 3 questions, a
person and a company 2 each: dev 7*3 + (51+10)*2 = 143, test 9*3 + (49+10)*2 = 145 and train
64*3 + (400+80)*2 = 1152 questions. Each split needs a city per country (its capital) and a
person per city (its mayor)."""

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


def assign_splits(seed: int = DEFAULT_SEED) -> dict[str, list[str]]:
    """The split of every entity: {kind: [split of index 0, split of index 1, ...]}."""
    rng = random.Random(f"{seed}/splits")
    out = {}
    for kind, total in SIZES.items():
        labels = [s for s in ("dev", "test") for _ in range(SPLIT_SIZES[s][kind])]
        labels += ["train"] * (total - len(labels))
        rng.shuffle(labels)
        out[kind] = labels
    return out


def _members(labels: dict[str, list[str]]) -> dict[str, dict[str, list[int]]]:
    """{kind: {split: [entity indices]}}, indices ascending."""
    return {kind: {s: [i for i, x in enumerate(split_of) if x == s] for s in SPLITS}
            for kind, split_of in labels.items()}


def _pair_up(members: dict[str, dict[str, list[int]]], owner: str, owned: str) -> dict[int, int]:
    """Within each split, the j-th `owner` entity gets the j-th `owned` one (a one-to-one map:
    country -> its capital city, city -> its mayor)."""
    out: dict[int, int] = {}
    for s in SPLITS:
        if len(members[owned][s]) < len(members[owner][s]):
            raise ValueError(f"split {s}: fewer {owned} than {owner}")
        out.update(zip(members[owner][s], members[owned][s], strict=False))
    return out


def build_world(seed: int = DEFAULT_SEED) -> World:
    """All entities; every link (capital, country, mayor, birthplace, founder, headquarters)
    joins entities of the same split, recorded as each entity's "split"."""
    rng = random.Random(seed)
    names = _Names(rng)
    labels = assign_splits(seed)
    members = _members(labels)
    capital, mayor = _pair_up(members, "countries", "cities"), _pair_up(members, "cities", "people")
    country_of_capital = {city: country for country, city in capital.items()}
    w = World()
    for i, s in enumerate(labels["countries"]):
        w.countries.append({"id": f"country-{i}", "name": names.word("country", 2), "split": s,
                            "capital": capital[i], "founded": rng.randint(900, 1800)})
    for i, s in enumerate(labels["cities"]):
        country = country_of_capital.get(i)
        if country is None:
            country = rng.choice(members["countries"][s])
        w.cities.append({"id": f"city-{i}", "name": names.word("city", rng.randint(1, 2)),
                         "split": s, "country": country,
                         "river": names.word("river", 1) + " River",
                         "mayor": mayor[i], "founded": rng.randint(1000, 1900)})
    for i, s in enumerate(labels["people"]):
        first, last = names.word("first", 1), names.word("last", 2)
        w.people.append({"id": f"person-{i}", "name": f"{first} {last}", "split": s,
                         "born_in": rng.choice(members["cities"][s]),
                         "born": rng.randint(1900, 1995), "profession": rng.choice(_PROFESSIONS)})
    for i, s in enumerate(labels["companies"]):
        w.companies.append({"id": f"company-{i}", "name": names.word("company", 2), "split": s,
                            "founder": rng.choice(members["people"][s]),
                            "hq": rng.choice(members["cities"][s]),
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
    if bridge["split"] != root["split"]:  # build_world links entities of one split only
        raise ValueError(f"{root['id']} -> {bridge['id']}: the hop crosses splits")
    return {"root": root["id"], "split": root["split"], "type": kind, "question": question,
            "golden_answers": answers, "supporting_ids": [root["id"], bridge["id"]],
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
    """Each question goes to the split of its entities, in a seeded order per split."""
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for q in qs:
        out[q["split"]].append(q)
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
    """Write `<name>.jsonl` for corpus/train/dev/test and `VERSION`; returns record counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, records in generate(seed).items():
        (out / f"{name}.jsonl").write_text(dump_jsonl(records), encoding="utf-8")
        counts[name] = len(records)
    (out / "VERSION").write_text(CORPUS_VERSION + "\n", encoding="utf-8")
    return counts

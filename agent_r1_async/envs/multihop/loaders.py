"""Loaders for multi-hop QA files on local disk -> `Task`s and a passage corpus.

Formats (each record becomes `Task(task_id, prompt=question, answer=[gold answers],
meta={"supporting_ids", "supporting_titles", "hops"?})`):
- FlashRAG JSONL: {"id", "question", "golden_answers", "metadata"?}; corpus JSONL with
  {"id", "contents": "Title\\ntext"} or {"id", "title", "text"} (the shipped synthetic data).
- HotpotQA / 2WikiMultihopQA (JSON list or JSONL): {"_id", "question", "answer",
  "supporting_facts": [[title, sent], ...], "context": [[title, [sentences]], ...]}; the
  corpus is every context paragraph of the loaded files (the distractor setting), id = title.
- MuSiQue JSONL: {"id", "question", "answer", "answer_aliases", "paragraphs": [{"title",
  "paragraph_text", "is_supporting"}]}; corpus id = "title" (paragraph texts joined per title).

Files are read with plain `json` (a .parquet file through pyarrow, which `datasets` installs);
no hub access.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_r1_async.envs.base import Task

Passage = dict[str, str]  # {"id", "title", "text"}


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a .jsonl, .json (a list, or {"data": [...]}) or .parquet file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"dataset file {str(p)!r} does not exist")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        data = json.loads(text)
        data = data.get("data", data) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise ValueError(f"{p}: expected a JSON list of records")
        return data
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{n}: not valid JSON ({e.msg})") from None
    return out


def _need(rec: dict[str, Any], key: str, where: str) -> Any:
    if key not in rec:
        raise ValueError(f"{where}: record {rec.get('id', rec.get('_id', '?'))!r} has no {key!r}")
    return rec[key]


# --- FlashRAG ---------------------------------------------------------------------------


def flashrag_task(rec: dict[str, Any], where: str = "flashrag") -> Task:
    meta = dict(rec.get("metadata") or {})
    golds = _need(rec, "golden_answers", where)
    meta.setdefault("supporting_ids", [])
    meta.setdefault("supporting_titles", [])
    return Task(str(_need(rec, "id", where)), _need(rec, "question", where),
                [str(g) for g in golds], meta)


def flashrag_passage(rec: dict[str, Any]) -> Passage:
    if "contents" in rec:  # FlashRAG wiki dumps: first line is the title, often quoted
        title, _, text = str(rec["contents"]).partition("\n")
        return {"id": str(rec["id"]), "title": title.strip().strip('"'), "text": text.strip()}
    return {"id": str(rec["id"]), "title": str(rec.get("title", "")), "text": str(rec["text"])}


# --- HotpotQA / 2WikiMultihopQA ----------------------------------------------------------


def hotpot_task(rec: dict[str, Any], where: str = "hotpotqa") -> Task:
    titles = list(dict.fromkeys(t for t, _ in rec.get("supporting_facts", [])))
    meta = {"supporting_ids": titles, "supporting_titles": titles, "type": rec.get("type", "")}
    qid = str(rec.get("_id", rec.get("id", "")))
    return Task(qid, _need(rec, "question", where), [str(_need(rec, "answer", where))], meta)


def hotpot_passages(rec: dict[str, Any]) -> Iterator[Passage]:
    for title, sentences in rec.get("context", []):
        text = " ".join(s.strip() for s in sentences) if isinstance(sentences, list) else sentences
        yield {"id": title, "title": title, "text": text}


# --- MuSiQue ------------------------------------------------------------------------------


def musique_task(rec: dict[str, Any], where: str = "musique") -> Task:
    paras = rec.get("paragraphs", [])
    titles = list(dict.fromkeys(p["title"] for p in paras if p.get("is_supporting")))
    answers = [str(_need(rec, "answer", where)), *map(str, rec.get("answer_aliases", []))]
    meta = {"supporting_ids": titles, "supporting_titles": titles,
            "answerable": rec.get("answerable", True)}
    return Task(str(_need(rec, "id", where)), _need(rec, "question", where), answers, meta)


def musique_passages(rec: dict[str, Any]) -> Iterator[Passage]:
    for p in rec.get("paragraphs", []):
        yield {"id": p["title"], "title": p["title"], "text": p["paragraph_text"]}


LOADERS = {
    "flashrag": (flashrag_task, None),
    "hotpotqa": (hotpot_task, hotpot_passages),
    "2wiki": (hotpot_task, hotpot_passages),
    "musique": (musique_task, musique_passages),
}


def load_tasks(fmt: str, path: str | Path) -> list[Task]:
    task_fn, _ = LOADERS[fmt]
    return [task_fn(r, f"{path}") for r in read_records(path)]


def corpus_from_records(fmt: str, paths: list[Path]) -> list[Passage]:
    """The distractor-setting corpus: context paragraphs of every file, merged per id."""
    _, passage_fn = LOADERS[fmt]
    if passage_fn is None:
        raise ValueError(f"{fmt}: needs a corpus file")
    merged: dict[str, Passage] = {}
    for path in paths:
        for rec in read_records(path):
            for p in passage_fn(rec):
                old = merged.get(p["id"])
                if old is None:
                    merged[p["id"]] = p
                elif p["text"] not in old["text"]:
                    old["text"] = f"{old['text']} {p['text']}"
    return [merged[k] for k in sorted(merged)]


def load_corpus(path: str | Path) -> list[Passage]:
    return [flashrag_passage(r) for r in read_records(path)]


SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "multihop"
"""The synthetic data the package ships (envs/multihop/generator.py)."""


def corpus_version(data_dir: str | Path) -> str:
    """The `VERSION` a generated data directory records (the shipped synthetic data: the
    generator's CORPUS_VERSION); "" when it has none (external datasets)."""
    path = Path(data_dir) / "VERSION"
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""

"""BM25 search over a local passage corpus (`bm25s`), with the index cached on disk.

The index is built once per corpus and saved under `<cache>/bm25/<corpus sha256[:16]>/`
(keyed by the corpus content, so an edited corpus gets a fresh index and two actors share
one). The build is atomic: written to a temporary directory, then renamed.
Passages are indexed as "title. text" so a query naming an entity finds its passage.
`SearchTool` runs the lookup in a worker thread so a huge corpus cannot stall the actor's
event loop and `asyncio.wait_for` can cut it at the tool timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import bm25s

from agent_r1_async.envs.multihop.loaders import Passage


def corpus_hash(corpus: list[Passage]) -> str:
    h = hashlib.sha256()
    for p in corpus:
        h.update(json.dumps([p["id"], p["title"], p["text"]], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


class BM25Index:
    """Top-k BM25 retrieval over `corpus`; `cache_dir=None` keeps the index in memory only."""

    def __init__(self, corpus: list[Passage], cache_dir: str | Path | None = None) -> None:
        if not corpus:
            raise ValueError("BM25Index: the corpus is empty")
        self.corpus = corpus
        self.key = corpus_hash(corpus)
        self.loaded_from_cache = False
        path = Path(cache_dir) / "bm25" / self.key if cache_dir is not None else None
        if path is not None and (path / "params.index.json").is_file():
            self.retriever = bm25s.BM25.load(str(path), show_progress=False)
            self.loaded_from_cache = True
        else:
            self.retriever = bm25s.BM25()
            texts = [f"{p['title']}. {p['text']}" for p in corpus]
            self.retriever.index(_tokenize(texts), show_progress=False)
            if path is not None:
                self._save(path)

    def _save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.key}-", dir=path.parent))
        try:
            self.retriever.save(str(tmp), show_progress=False)
            os.replace(tmp, path)
        except OSError:  # another process won the race: its index is the same
            shutil.rmtree(tmp, ignore_errors=True)

    def search(self, query: str, k: int) -> list[Passage]:
        tokens = _tokenize([query])
        if not tokens[0]:
            return []
        k = min(k, len(self.corpus))
        docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        # docs/scores: [1, k]; zero-score hits share no term with the query
        return [self.corpus[int(i)] for i, s in zip(docs[0], scores[0], strict=True) if s > 0]


class SearchTool:
    name = "search"
    description = "Search the knowledge base. Returns the most relevant passages."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "description": "search words"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, index: BM25Index, top_k: int) -> None:
        self.index, self.top_k = index, top_k

    async def call(self, query: str) -> list[Passage]:
        return await asyncio.to_thread(self.index.search, query, self.top_k)

"""`multihop_qa`: multi-hop question answering with a BM25 `search` tool (the Agent-R1 task).

Rewards: outcome = exact match (or F1, `outcome: f1`) of the `<answer>` against the gold
answers; process = `gold_retrieval_reward` the first time a search returns each gold
supporting passage, plus the ToolEnv's format shaping (first well-formed call, malformed-call
penalty). Data: the shipped synthetic corpus by default, or local HotpotQA / 2Wiki / MuSiQue /
FlashRAG files (`dataset`, `data_dir`, `split_files`, `corpus_path`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.multihop import loaders
from agent_r1_async.envs.multihop.search import BM25Index, SearchTool
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.rewards import answer_in_output, exact_match, f1_score
from agent_r1_async.envs.toolenv import (
    CallOutcome,
    EpisodeState,
    Score,
    Shaping,
    ToolCall,
    ToolEnv,
    tool_call_text,
)

SHIPPED_DIR = loaders.SHIPPED_DIR

SYSTEM_PROMPT = (
    "Answer the question. You can search a knowledge base, one fact at a time:\n"
    '<tool_call>{"name": "search", "arguments": {"query": "capital of Veltrania"}}</tool_call>\n'
    "Search again with what you learn, then give a short final answer like this: "
    "<answer>Ostrum</answer>"
)


class MultihopArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    dataset: Literal["synthetic", "flashrag", "hotpotqa", "2wiki", "musique"] = "synthetic"
    """File format of `data_dir` ("synthetic" = the shipped data, FlashRAG format)."""
    data_dir: str = ""
    """Directory with <split>.jsonl|json|parquet (and corpus.jsonl for flashrag)."""
    split_files: dict[str, str] = {}
    """Explicit split -> file paths (override the files found in `data_dir`)."""
    corpus_path: str = ""
    """Corpus file (flashrag); empty: data_dir/corpus.jsonl, or the context paragraphs."""
    top_k: int = 3
    """Passages a search returns."""
    cache_dir: str = ""
    """Where the BM25 index is cached (empty: <agent_r1_async cache>)."""
    outcome: Literal["em", "f1"] = "em"
    """Outcome reward."""
    gold_retrieval_reward: float = 0.1
    """Process reward the first time a search returns each gold supporting passage."""
    valid_call_reward: float = 0.05
    """Process reward for the first well-formed search call of an episode."""
    invalid_call_penalty: float = -0.1
    """Process reward of a step with a malformed call."""

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError("top_k: must be >= 1")
        if self.dataset != "synthetic" and not (self.data_dir or self.split_files):
            raise ValueError(f"data_dir: required for dataset {self.dataset!r}")


def format_passages(passages: list[dict[str, str]]) -> str:
    if not passages:
        return "No results."
    return "\n".join(f"({i}) {p['title']}: {p['text']}" for i, p in enumerate(passages, 1))


class MultihopDomain:
    """Search tool, prompt and scoring of multi-hop QA (a ToolDomain)."""

    def __init__(self, index: BM25Index, args: MultihopArgs) -> None:
        self.args = args
        self.tools = [SearchTool(index, args.top_k)]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def score(self, task: Task, answer: str | None) -> Score:
        em, f1 = exact_match(answer, task.answer), f1_score(answer, task.answer)
        return Score(em if self.args.outcome == "em" else f1, {"em": em, "f1": f1})

    def output_metrics(self, task: Task, action: str) -> dict[str, float]:
        """`answer_in_output`: a gold answer occurs in the last action, tags or not (what an
        untrained model that ignores the answer format knows)."""
        return {"answer_in_output": answer_in_output(action, task.answer)}

    def format_result(self, call: ToolCall, result: Any) -> str:
        return format_passages(result)

    def process_reward(self, state: EpisodeState, outcome: CallOutcome) -> float:
        gold_ids = set(state.task.meta.get("supporting_ids", []))
        gold_titles = set(state.task.meta.get("supporting_titles", []))
        seen: set[str] = state.scratch.setdefault("gold_seen", set())
        new = {p["id"] for p in outcome.result or []
               if p["id"] in gold_ids or p["title"] in gold_titles} - seen
        seen.update(new)
        return self.args.gold_retrieval_reward * len(new)


def _split_file(args: MultihopArgs, data_dir: Path, split: str) -> Path:
    if split in args.split_files:
        return Path(args.split_files[split])
    for ext in (".jsonl", ".json", ".parquet"):
        if (data_dir / f"{split}{ext}").is_file():
            return data_dir / f"{split}{ext}"
    raise ValueError(f"multihop_qa: no file for split {split!r} in {str(data_dir)!r}")


@register_env("multihop_qa")
class MultihopQAEnv:
    """Multi-hop QA with BM25 search (synthetic corpus, or HotpotQA/2Wiki/MuSiQue/FlashRAG)."""

    Args = MultihopArgs

    def __init__(self, args: MultihopArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg = args, env_cfg
        self.format = "flashrag" if args.dataset == "synthetic" else args.dataset
        self.data_dir = Path(args.data_dir) if args.data_dir else SHIPPED_DIR
        self.corpus_version = loaders.corpus_version(self.data_dir)
        self._tasks: dict[str, list[Task]] = {}
        self.index = BM25Index(self._corpus(), self._cache_dir())
        self.domain = MultihopDomain(self.index, args)
        self.shaping = Shaping(
            valid_call=args.valid_call_reward, invalid_call=args.invalid_call_penalty
        )

    def _cache_dir(self) -> Path:
        if self.args.cache_dir:
            return Path(self.args.cache_dir)
        from agent_r1_async.models import cache_dir

        return cache_dir()

    def _corpus(self) -> list[loaders.Passage]:
        if self.format == "flashrag" or self.args.corpus_path:
            return loaders.load_corpus(self.args.corpus_path or self.data_dir / "corpus.jsonl")
        files = [Path(p) for p in self.args.split_files.values()]
        if self.args.data_dir:
            exts = (".json", ".jsonl", ".parquet")
            files += [p for p in sorted(self.data_dir.iterdir()) if p.suffix in exts]
        return loaders.corpus_from_records(self.format, list(dict.fromkeys(files)))

    def make(self) -> ToolEnv:
        return ToolEnv(
            self.domain, max_turns=self.env_cfg.max_turns,
            tool_timeout_s=self.env_cfg.tool_timeout_s, shaping=self.shaping,
        )

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            path = _split_file(self.args, self.data_dir, split)
            self._tasks[split] = loaders.load_tasks(self.format, path)
        return self._tasks[split]

    def oracle(self, task: Task) -> list[str]:
        """Search each gold hop (its query, else the supporting title), then answer."""
        hops = task.meta.get("hops") or [{"query": t} for t in task.meta["supporting_titles"]]
        calls = [tool_call_text(ToolCall("search", {"query": h["query"]})) for h in hops]
        return [*calls, f"<answer>{task.answer[0]}</answer>"]

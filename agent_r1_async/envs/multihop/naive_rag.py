"""Naive RAG (the Agent-R1 paper's baseline): retrieve once with the question, answer in one turn.

The question itself is the BM25 query against the env's own index (the same index and passage
format the `search` tool uses); the top `k` passages go into the prompt and the model answers
in one turn, with no tool. The answer is scored by the env's own `score` (EM / F1), so the
numbers compare with the agent's. The answer is the `<answer>` span when there is one, else
the action's first non-empty line: lenient on purpose, so the baseline is not lost to format
alone (an untrained model rarely writes the tags).

On the synthetic corpus a question names only its first-hop entity, so BM25 on the question
finds the first passage but rarely the second: what one retrieval cannot do is what the
search agent has to learn. `retrieval_recall` measures that cap for a split and a `k` (the
share of questions whose top-k passages hold the answer, and hold every gold supporting
passage), so `k` can be chosen where retrieval does not bound the baseline:

    python -m agent_r1_async.envs.multihop.naive_rag --split dev --k 2 4 6 8 10

A reader for this baseline is trained on the same prompts (`rag_transcript`: the one-turn
prompt, then the gold answer in the answer format), written as an `sft.demos_source: jsonl`
file for the train split in the order the oracle warm start of a seed takes its tasks:

    python -m agent_r1_async.envs.multihop.naive_rag --demos-out rag.jsonl --num-demos 64 --seed 0 --k 8
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task, demo_tasks
from agent_r1_async.envs.multihop.env import format_passages
from agent_r1_async.envs.multihop.loaders import Passage
from agent_r1_async.envs.multihop.search import BM25Index
from agent_r1_async.envs.rewards import answer_in_output, extract_answer

RAG_SYSTEM_PROMPT = (
    "Answer the question using the passages. Give a short final answer like this: "
    "<answer>Ostrum</answer>"
)


def rag_passages(index: BM25Index, task: Task, k: int) -> list[Passage]:
    """The passages the baseline shows: BM25's top `k` for the question (fewer when fewer
    passages share a term with it)."""
    return index.search(task.prompt, k)


def rag_user_message(index: BM25Index, task: Task, k: int) -> str:
    """The one user message: the top-`k` passages BM25 ranks for the question, then it."""
    passages = rag_passages(index, task, k)
    return f"Passages:\n{format_passages(passages)}\n\nQuestion: {task.prompt}"


def lenient_answer(action: str) -> str | None:
    """The `<answer>` span, else the first non-empty line of the action (None if empty)."""
    answer = extract_answer(action)
    if answer is not None:
        return answer
    for line in action.splitlines():
        if line.strip():
            return line.strip()
    return None


class NaiveRAGEnv:
    """One-turn episode: passages in the prompt, the first action is the answer."""

    def __init__(self, index: BM25Index, domain: Any, k: int) -> None:
        if k < 1:
            raise ValueError(f"naive RAG: k must be >= 1, got {k}")
        self.index, self.domain, self.k = index, domain, k
        self.task: Task | None = None

    async def reset(self, task: Task) -> Observation:
        self.task = task
        return Observation([
            {"role": "system", "content": RAG_SYSTEM_PROMPT},
            {"role": "user", "content": rag_user_message(self.index, task, self.k)},
        ])

    async def step(self, action: str) -> StepResult:
        if self.task is None:
            raise EnvError("step() called before reset()")
        task, self.task = self.task, None  # one turn only
        answer = lenient_answer(action)
        score = self.domain.score(task, answer)
        metrics = {**score.metrics, "format_ok": float(extract_answer(action) is not None),
                   **self.domain.output_metrics(task, action), "turns": 1.0, "tool_calls": 0.0}
        return StepResult(Observation([]), 0.0, True, outcome_reward=float(score.reward),
                          metrics=metrics)


def naive_rag_factory(definition: Any, k: int | None = None) -> Any:
    """`make()` for the evaluation of env definition `definition` (needs `.index`, `.domain`);
    `k` defaults to the env's `top_k`."""
    index, domain = getattr(definition, "index", None), getattr(definition, "domain", None)
    if not isinstance(index, BM25Index) or domain is None:
        raise ValueError(f"--baseline naive_rag: env {type(definition).__name__} has no BM25 "
                         "retrieval index (only multihop_qa does)")
    top_k = k or definition.args.top_k
    return lambda: NaiveRAGEnv(index, domain, top_k)


# --- retrieval recall: how much of the dataset one retrieval can answer at all ------------


@dataclass(frozen=True)
class RetrievalRecall:
    """Recall of the baseline's retrieval on `tasks` questions at `k` passages."""

    k: int
    tasks: int
    answer: float
    """Share of questions whose top-k passages contain a gold answer (an upper bound on what a
    reader of those passages can get right, for extractive answers)."""
    support: float
    """Share of questions whose top-k passages include every gold supporting passage."""


def passage_has_answer(passage: Passage, answers: Sequence[str]) -> bool:
    """Whether a gold answer occurs in the passage's title or text as whole words, both sides
    normalized as exact match normalizes them (case, punctuation, articles)."""
    return bool(answer_in_output(f"{passage['title']} {passage['text']}", answers))


def has_all_support(passages: Sequence[Passage], task: Task) -> bool:
    """Whether every gold supporting passage of `task` is among `passages` (matched by id or
    title, as the env's retrieval reward matches them); False when the task lists none."""
    ids = {p["id"] for p in passages}
    titles = {p["title"] for p in passages}
    golds = list(zip_longest(task.meta.get("supporting_ids", []),
                             task.meta.get("supporting_titles", [])))
    return bool(golds) and all(i in ids or t in titles for i, t in golds)


def retrieval_recall(index: BM25Index, tasks: Sequence[Task], k: int) -> RetrievalRecall:
    """Answer and support recall of the baseline's top-`k` retrieval (query: the question)."""
    if not tasks:
        raise ValueError("retrieval_recall: no tasks")
    answer = support = 0
    for task in tasks:
        passages = rag_passages(index, task, k)
        answer += any(passage_has_answer(p, task.answer) for p in passages)
        support += has_all_support(passages, task)
    n = len(tasks)
    return RetrievalRecall(k, n, answer / n, support / n)


def format_recall_table(rows: Sequence[RetrievalRecall]) -> str:
    """A Markdown table: k, answer recall, support recall."""
    lines = ["| k | answer in top-k | all gold passages in top-k |", "|---|---|---|"]
    lines += [f"| {r.k} | {r.answer:.3f} | {r.support:.3f} |" for r in rows]
    return "\n".join(lines)


def rag_transcript(index: BM25Index, task: Task, k: int) -> dict[str, Any]:
    """One demonstration for a Naive RAG reader: the baseline's prompt for `task`, then its
    first gold answer in the answer format (whether or not the passages hold it, as a reader
    trained on a retriever's output is)."""
    return {"messages": [
        {"role": "system", "content": RAG_SYSTEM_PROMPT},
        {"role": "user", "content": rag_user_message(index, task, k)},
        {"role": "assistant", "content": f"<answer>{task.answer[0]}</answer>"},
    ]}


def main(argv: list[str] | None = None) -> None:
    """Print the baseline's retrieval recall@k on a split of the shipped synthetic data, or
    (`--demos-out`) write a reader's demonstrations on the train split."""
    from agent_r1_async.envs.multihop import loaders
    from agent_r1_async.envs.multihop.env import SHIPPED_DIR

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 6, 8, 10])
    ap.add_argument("--demos-out", default="", metavar="FILE",
                    help="write --num-demos reader demonstrations (train split, one k) here")
    ap.add_argument("--num-demos", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0,
                    help="--demos-out: the task order of the oracle warm start at this seed")
    args = ap.parse_args(argv)
    index = BM25Index(loaders.load_corpus(SHIPPED_DIR / "corpus.jsonl"))
    if args.demos_out:
        if len(args.k) != 1:
            raise SystemExit("--demos-out: give one --k")
        train = loaders.load_tasks("flashrag", SHIPPED_DIR / "train.jsonl")
        chosen = demo_tasks(train, args.seed, 0)[:args.num_demos]
        with open(args.demos_out, "w") as f:
            for task in chosen:
                f.write(json.dumps(rag_transcript(index, task, args.k[0])) + "\n")
        print(f"{len(chosen)} reader demonstrations (k={args.k[0]}) -> {args.demos_out}")
        return
    tasks = loaders.load_tasks("flashrag", SHIPPED_DIR / f"{args.split}.jsonl")
    print(f"{args.split}: {len(tasks)} questions")
    print(format_recall_table([retrieval_recall(index, tasks, k) for k in args.k]))


if __name__ == "__main__":
    main()

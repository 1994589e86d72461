"""Naive RAG (the Agent-R1 paper's baseline): retrieve once with the question, answer in one turn.

The question itself is the BM25 query against the env's own index (the same index and passage
format the `search` tool uses); the top `k` passages go into the prompt and the model answers
in one turn, with no tool. The answer is scored by the env's own `score` (EM / F1), so the
numbers compare with the agent's. The answer is the `<answer>` span when there is one, else
the action's first non-empty line: lenient on purpose, so the baseline is not lost to format
alone (an untrained model rarely writes the tags).

On the synthetic corpus a question names only its first-hop entity, so BM25 on the question
finds the first passage but rarely the second: what one retrieval cannot do is what the
search agent has to learn.
"""

from __future__ import annotations

from typing import Any

from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task
from agent_r1_async.envs.multihop.env import format_passages
from agent_r1_async.envs.multihop.search import BM25Index
from agent_r1_async.envs.rewards import extract_answer

RAG_SYSTEM_PROMPT = (
    "Answer the question using the passages. Give a short final answer like this: "
    "<answer>Ostrum</answer>"
)


def rag_user_message(index: BM25Index, task: Task, k: int) -> str:
    """The one user message: the top-`k` passages BM25 ranks for the question, then it."""
    passages = index.search(task.prompt, k)
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
        answer = lenient_answer(action)
        score = self.domain.score(self.task, answer)
        self.task = None  # one turn only
        metrics = {**score.metrics, "format_ok": float(extract_answer(action) is not None),
                   "turns": 1.0, "tool_calls": 0.0}
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

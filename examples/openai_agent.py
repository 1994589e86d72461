"""An agent written with the `openai` client, trained as a black box (`env.name: blackbox`).

Nothing here knows about the trainer: `run` is an ordinary OpenAI tool-calling loop that
solves an arithmetic word problem (the problems of the `arithmetic` env) with a calculator
and returns 1.0 when its final number is right. The actor gives it a `base_url` whose calls
land in the episode's session on the actor's generation endpoint; every completion it asks
for becomes a training step, exactly as sampled, and the returned reward is the outcome.

    agent-r1-async launch --config configs/blackbox_example.yaml

The same function runs against any OpenAI-compatible server (a vLLM server, say):
`run(task, "http://localhost:8000/v1")`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from openai import OpenAI

from agent_r1_async.envs.arithmetic import (
    ArithmeticArgs,
    CalcError,
    answer_value,
    calculate,
    make_tasks,
)
from agent_r1_async.envs.base import Task

SYSTEM = ("Solve the problem. You can call the calculator tool. When you know the result, "
          "write the final number like this: <answer>84</answer>")
TOOLS = [{"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object",
                   "properties": {"expression": {"type": "string", "description": "e.g. 12*7"}},
                   "required": ["expression"]}}}]
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def tasks(split: str) -> list[Task]:
    """The arithmetic env's problems (1 operation, 3 digits) of `split`: train, dev, test."""
    return make_tasks(ArithmeticArgs(), split)


def calculator(arguments: str) -> str:
    try:
        return calculate(str(json.loads(arguments).get("expression", "")))
    except (CalcError, json.JSONDecodeError, AttributeError) as e:
        return f"Error: {e}"


def final_number(text: str) -> Any:
    """The number in <answer>...</answer>, or None."""
    match = _ANSWER.search(text or "")
    return None if match is None else answer_value(match.group(1))


def run(task: Task, base_url: str, api_key: str = "unused", max_turns: int = 3) -> float:
    """Ask, run the calculator for every tool call, ask again; 1.0 for the right answer."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": task.prompt}]
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS,  # type: ignore[arg-type]
        ).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            return 1.0 if final_number(reply.content or "") == task.answer else 0.0
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": calculator(call.function.arguments)})
    return 0.0

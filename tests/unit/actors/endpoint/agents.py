"""Black-box agents for the endpoint tests, written with the `openai` client as a user would
(named as `tests.unit.actors.endpoint.agents:NAME` in `env.args.agent`)."""

from __future__ import annotations

import time
from typing import Any

from openai import AsyncOpenAI, OpenAI

from agent_r1_async.envs.base import Task


def tasks(split: str) -> list[Any]:
    return [{"task_id": f"{split}-0", "prompt": "What is 2+2?", "answer": 4},
            Task(f"{split}-1", "What is 3+3?", 6)]


def _client(base_url: str, api_key: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


def _ask(client: OpenAI, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
    return r.choices[0].message.model_dump(exclude_none=True)


def two_turns(task: Task, base_url: str, api_key: str, reward: float = 0.75) -> float:
    """Asks, echoes the answer back with a follow-up, asks again; returns `reward`."""
    client = _client(base_url, api_key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
    messages.append(_ask(client, messages))
    messages.append({"role": "user", "content": "Are you sure?"})
    _ask(client, messages)
    return reward


async def async_one_turn(task: Task, base_url: str, api_key: str) -> float:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
    await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task.prompt}])
    return 0.5


def raises_after_one_call(task: Task, base_url: str, api_key: str) -> float:
    _ask(_client(base_url, api_key), [{"role": "user", "content": task.prompt}])
    raise ValueError("boom\nsecond line of the message")


SLEEPERS: list[dict[str, bool]] = []
"""One entry per `sleeps_after_one_call` run, in order: whether its sleep has ended."""


def sleeps_after_one_call(task: Task, base_url: str, api_key: str) -> float:
    _ask(_client(base_url, api_key), [{"role": "user", "content": task.prompt}])
    me = {"awake": False}
    SLEEPERS.append(me)
    time.sleep(30)
    me["awake"] = True
    return 1.0


def makes_no_call(task: Task, base_url: str, api_key: str) -> float:
    return 1.0


def calls_until_refused(task: Task, base_url: str, api_key: str) -> float:
    client = _client(base_url, api_key)
    while True:  # a refused call raises openai.BadRequestError
        _ask(client, [{"role": "user", "content": task.prompt}])


def returns_a_string(task: Task, base_url: str, api_key: str) -> Any:
    _ask(_client(base_url, api_key), [{"role": "user", "content": task.prompt}])
    return "1.0"


def long_prompt(task: Task, base_url: str, api_key: str) -> float:
    _ask(_client(base_url, api_key), [{"role": "user", "content": "word " * 400}])
    return 1.0


def takes_no_key(task: Task, base_url: str) -> float:
    """An agent that cannot authenticate: refused at configuration under endpoint.auth: token."""
    _ask(_client(base_url, "unused"), [{"role": "user", "content": task.prompt}])
    return 1.0

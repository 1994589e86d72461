"""A black-box agent for the launch test, written with the `openai` client: it asks, echoes
the answer back with a follow-up, asks again, and notes every response's token-level record
(the `agent_r1` field) and the text it read in a JSONL file per process under `log_dir`."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from openai import OpenAI

from agent_r1_async.envs.base import Task

_lock = threading.Lock()


def _note(log_dir: str, record: dict[str, Any], content: str) -> None:
    line = json.dumps({**record, "content": content})
    with _lock, open(Path(log_dir) / f"calls-{os.getpid()}.jsonl", "a") as f:
        f.write(line + "\n")


def run(task: Task, base_url: str, api_key: str, log_dir: str) -> float:
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
    contents = []
    for follow_up in ("Check it.", None):
        response = client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
        message = response.choices[0].message
        _note(log_dir, response.agent_r1, message.content or "")  # type: ignore[attr-defined]
        contents.append(message.content or "")
        messages.append(message.model_dump(exclude_none=True))
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    return float(len(contents[-1]) % 2)  # varies across a group, so advantages do too

"""A verifiers v1 environment defined for the tests (no hub): run by the verifiers venv.

`VfEchoTaskset` yields `num_tasks` prompts; its harness (in-process, an `openai` client on
the rollout's interception endpoint) asks, follows up with "Check it.", asks again, and notes
each response's token-level record (the endpoint's `agent_r1` field, passed through by
verifiers' proxy) and the text it read in a JSONL file per process under `log_dir`. The
reward is `len(last reply) % 2` (varies across a group). `mode` makes every episode fail one
way: `exit` kills the server process, `sleep` never returns, `no_call` makes no model call,
`bad_reward` raises in scoring.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI


class VfEchoTask(vf.Task[vf.TaskData]):
    @vf.reward(weight=1.0)
    async def parity(self, trace: vf.Trace) -> float:
        if "bad-reward" in (self.data.name or ""):
            raise ValueError("this reward always fails")
        return float(len(trace.last_reply) % 2)


class VfEchoConfig(vf.TasksetConfig):
    num_tasks: int = 6
    mode: str = "ok"


class VfEchoTaskset(vf.Taskset[VfEchoTask, VfEchoConfig]):
    def load(self) -> list[VfEchoTask]:
        name = "bad-reward" if self.config.mode == "bad_reward" else None
        return [VfEchoTask(vf.TaskData(id=f"echo-{i}", name=name,
                                       prompt=f"Name a colour number {i}."), self.config.task)
                for i in range(self.config.num_tasks)]


class VfEchoHarnessConfig(vf.HarnessConfig):
    log_dir: str = ""
    mode: str = "ok"


class VfEchoHarness(vf.Harness[VfEchoHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime,
                     endpoint: str, secret: str, mcp_urls: dict[str, str],
                     data: vf.TaskData) -> vf.ProgramResult:
        mode = self.config.mode
        if mode == "exit":
            os._exit(3)
        if mode == "sleep":
            await asyncio.sleep(3600)
        if mode == "no_call":
            return vf.ProgramResult(exit_code=0, stdout="", stderr="")
        messages: list[dict[str, Any]] = [{"role": "user", "content": data.prompt_text}]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                               timeout=600.0) as client:
            for follow_up in ("Check it.", None):
                response = await client.chat.completions.create(model=ctx.model,
                                                                 messages=messages)
                message = response.choices[0].message
                if self.config.log_dir:
                    record = {**response.agent_r1, "content": message.content or ""}
                    path = Path(self.config.log_dir) / f"calls-{os.getpid()}.jsonl"
                    with open(path, "a") as f:
                        f.write(json.dumps(record) + "\n")
                messages.append(message.model_dump(exclude_none=True))
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = ["VfEchoHarness", "VfEchoTaskset"]

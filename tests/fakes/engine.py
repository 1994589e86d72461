"""FakeEngine: the one scripted inference engine of the tests (the `Engine` protocol).

What it answers is a `reply(context_ids, call_index) -> action ids` function; the three
constructors cover every test:

    FakeEngine.repeating([28, 29])               the same ids on every call
    FakeEngine.scripted([[1, 2], [3]])           call n answers the n-th list
    FakeEngine.by_turn(tokenizer, {prompt: [text of turn 0, text of turn 1, ...]})
        plays a transcript: the task is the prompt found in the context (longest match; ""
        matches any), the turn is the number of assistant headers before the generation
        prompt; the text is tokenized and closed with eos

Misbehaviour on request: `delay_s` sleeps before every answer, the call numbered
`fail_on_call` (0-based) raises `EngineError`, calls from `hang_from` on never answer (until
cancelled). Every call is recorded in `calls` and every loaded version in `loaded`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import torch

from agent_r1_async.actors.engines.base import EngineError, GenResult

Reply = Callable[[list[int], int], list[int]]


class FakeEngine:
    def __init__(
        self,
        reply: Reply,
        *,
        logprob: float = -0.5,
        delay_s: float = 0.0,
        fail_on_call: int | None = None,
        hang_from: int | None = None,
    ) -> None:
        self.reply = reply
        self.logprob = logprob
        self.delay_s = delay_s
        self.fail_on_call = fail_on_call
        self.hang_from = hang_from
        self.version = 0
        self.calls: list[tuple[list[int], int | None]] = []
        self.loaded: list[int] = []

    @classmethod
    def repeating(cls, action_ids: list[int], **kw: Any) -> FakeEngine:
        """Answers `action_ids` (cut to `max_new_tokens`) on every call."""
        return cls(lambda _ctx, _n: list(action_ids), **kw)

    @classmethod
    def scripted(cls, actions: list[list[int]], **kw: Any) -> FakeEngine:
        """Call n answers `actions[n]` (IndexError past the end: the script was too short)."""
        return cls(lambda _ctx, n: list(actions[n]), **kw)

    @classmethod
    def by_turn(cls, tokenizer: Any, transcripts: Mapping[str, list[str]], **kw: Any) -> FakeEngine:
        """Answers turn t of the transcript whose prompt the context holds (see module doc)."""
        encoded = {
            prompt: [[*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id]
                     for t in texts]
            for prompt, texts in transcripts.items()
        }

        def reply(context_ids: list[int], _n: int) -> list[int]:
            text = tokenizer.decode(context_ids)
            prompt = max((p for p in encoded if p in text), key=len)
            turn = text.count("<|im_start|>assistant") - 1  # the generation prompt is the last
            return list(encoded[prompt][turn])

        return cls(reply, **kw)

    async def generate(
        self, context_ids: list[int], max_new_tokens: int | None = None
    ) -> GenResult:
        n = len(self.calls)
        self.calls.append((list(context_ids), max_new_tokens))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.hang_from is not None and n >= self.hang_from:
            await asyncio.sleep(3600)
        if n == self.fail_on_call:
            raise EngineError("scripted engine failure")
        ids = self.reply(list(context_ids), n)
        if max_new_tokens is not None:
            ids = ids[:max_new_tokens]
        return GenResult(ids, [self.logprob] * len(ids), "stop", self.version)

    async def load_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        self.version = version
        self.loaded.append(version)

    async def close(self) -> None:
        pass

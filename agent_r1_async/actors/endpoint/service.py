"""Generation for the endpoint's routes: straight to the actor's engine, recorded per session.

Both routes end in one engine call (`Engine.generate(context_ids, max_new_tokens)`, the call
a rollout step makes) on the actor's own event loop, so the engine batches endpoint calls
with everything else in flight. Token-in/token-out takes the client's prompt ids as the
context; chat renders the conversation into a segment of its session (segments.py) and
builds the context with the actor's context builder, exactly as a rollout step would.

A call's failures mirror a rollout step's (actors/rollout.py), as an HTTP error for the
client and a `cut` for its episode (sessions.py): a context with no room in
`model.max_model_len` (400), an engine failure or an empty action (500). A chat whose
text alone cannot fit is refused the same way before it is rendered: no token of the
model's vocabulary spells more than `max_token_chars` characters, so a conversation whose
message and tool text holds N characters renders into at least N / max_token_chars tokens
(for a windowed context builder, only the first and newest messages and the tools count:
every window keeps them). The actor's counters see every call's tokens and generation time,
and a recorded agent's own time between calls as env time (the launcher reads their growth
as the actor's progress).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from agent_r1_async.actors.context import ContextBuilder, FullContext
from agent_r1_async.actors.endpoint.calls import Call
from agent_r1_async.actors.endpoint.chat import Answer, ChatRequest, answer
from agent_r1_async.actors.endpoint.params import EngineSampling, RequestError
from agent_r1_async.actors.endpoint.segments import Segments
from agent_r1_async.actors.endpoint.sessions import Session, SessionStore
from agent_r1_async.actors.endpoint.tito import GenerateRequest
from agent_r1_async.actors.engines.base import Engine
from agent_r1_async.actors.stats import ActorCounters


@dataclass
class EndpointStats:
    """Totals since the endpoint started."""

    calls: int = 0
    unrecorded: int = 0
    """Calls that named no session: served, not trained on."""
    divergences: int = 0
    refused: int = 0
    """Requests answered with an error (counted by the server)."""


@dataclass
class GenerationService:
    engine: Engine
    tokenizer: Any
    builder: ContextBuilder
    sampling: EngineSampling
    max_model_len: int
    vocab_size: int
    model_name: str
    counters: ActorCounters = field(default_factory=ActorCounters)
    sessions: SessionStore = field(default_factory=SessionStore)
    stats: EndpointStats = field(default_factory=EndpointStats)
    max_token_chars: int = 0
    """The most characters one token of the vocabulary spells (0: read from the tokenizer)."""

    def __post_init__(self) -> None:
        if not self.max_token_chars:
            self.max_token_chars = longest_token(self.tokenizer)

    @property
    def max_body_bytes(self) -> int:
        """The longest request body served: `model.max_model_len` tokens of the longest
        spelling, each character escaped in JSON (\\uXXXX, 6 bytes), plus 128 bytes of JSON
        around each token (a message per token at most) and 64 KiB for the rest."""
        return self.max_model_len * (6 * self.max_token_chars + 128) + (64 << 10)

    def session(self, session_id: str | None) -> Session:
        """The open session `session_id`, or a throwaway unrecorded one for None."""
        if session_id is None:
            return Session("", self.tokenizer)
        return self.sessions.get(session_id)

    async def generate(self, session: Session, req: GenerateRequest) -> Call:
        """Token-in/token-out: the client's ids are the context."""
        agent_s = self._admit(session)
        call = await self._sample(session, req.token_ids, req.max_new_tokens, agent_s)
        await self._record(session, call)
        return call

    async def chat(self, session: Session, req: ChatRequest) -> tuple[Call, Answer, list[str]]:
        """Chat: (the call, the assistant's answer, each action token decoded when the
        request wants log-probs)."""
        agent_s = self._admit(session)
        seen = req.messages if isinstance(self.builder, FullContext) else [
            req.messages[0], req.messages[-1]]  # a window keeps the instruction and the newest
        least = text_chars(seen, req.tools) // self.max_token_chars
        if least >= self.max_model_len:
            self._refuse_length(session, least, "at least ")
        try:
            seg, diverged = session.segments.place(req.messages, req.tools)
        except Exception as e:  # the chat template refused the conversation
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise RequestError(f"messages: the chat template cannot render them: "
                               f"{type(e).__name__}: {first}") from None
        self.stats.divergences += diverged
        try:
            context = self.builder.build(seg.history)
            call = await self._sample(session, context, req.max_new_tokens, agent_s)
        except BaseException:
            Segments.failed(seg)
            raise
        text = self.tokenizer.decode(call.gen.action_ids, skip_special_tokens=True)
        ans = answer(text, req.parse_tools)
        Segments.answered(seg, call.gen.action_ids, ans.canonical)
        call.segment, call.diverged, call.num_tool_calls = seg.index, diverged, ans.num_tool_calls
        await self._record(session, call)
        pieces = ([self.tokenizer.decode([t]) for t in call.gen.action_ids]
                  if req.want_logprobs else [])
        return call, ans, pieces

    def _admit(self, session: Session) -> float:
        self.stats.calls += 1
        self.stats.unrecorded += not session.recorded
        agent_s = session.admit()
        if session.recorded:  # the agent's own stretch ended: counted as a rollout's env time
            self.counters.env_time_s += agent_s
        return agent_s

    async def _sample(self, session: Session, context: list[int], budget: int,
                      agent_s: float) -> Call:
        if len(context) >= self.max_model_len:
            self._refuse_length(session, len(context))
        t0 = time.perf_counter()
        try:
            gen = await self.engine.generate(context, budget)
        except Exception as e:
            self._engine_failed(session, f"{type(e).__name__}: {e}")
        finally:
            self.counters.gen_time_s += time.perf_counter() - t0
        gen.gen_time_s = time.perf_counter() - t0
        self.counters.tokens += len(gen.action_ids)
        if not gen.action_ids:
            self._engine_failed(session, f"engine returned no tokens ({gen.finish_reason})")
        return Call(context, gen, agent_s, session_id=session.session_id or None)

    def _refuse_length(self, session: Session, n: int, bound: str = "") -> NoReturn:
        first = session.recorder is None or session.recorder.recorded == 0
        reason = (f"context of {bound}{n} tokens reaches "
                  f"model.max_model_len={self.max_model_len}")
        if first:
            session.end_with("env_error", f"the agent's first {reason}")
        else:
            session.end_with("truncated", reason)
        raise RequestError(reason, 400, "invalid_request_error", "context_length_exceeded")

    def _engine_failed(self, session: Session, why: str) -> NoReturn:
        session.end_with("engine_error", why)
        raise RequestError(f"the engine failed: {why}", 500, "server_error")

    async def _record(self, session: Session, call: Call) -> None:
        if session.closed:  # the agent returned (or the actor stopped) while this generated
            raise RequestError("this session's episode has ended; the call is not recorded",
                               410, "invalid_request_error", "session_ended")
        if session.recorder is not None:
            await session.recorder.add(call)
        session.idle_since = time.perf_counter()


def longest_token(tokenizer: Any) -> int:
    """The most characters one token of `tokenizer`'s vocabulary spells (byte-level
    vocabularies spell a byte per character, so this bounds the bytes too)."""
    try:
        vocab = tokenizer.get_vocab()
    except (AttributeError, NotImplementedError):
        vocab = {}
    return max((len(t) for t in vocab), default=0) or 64


def text_chars(messages: Iterable[Any], tools: Iterable[Any]) -> int:
    """Characters of every string in the messages' contents and tool calls and in the tool
    schemas (keys and values): each is rendered into the context, so the context spells at
    least this many. Iterative, so no nesting can exhaust the stack."""
    total = 0
    stack: list[Any] = [[m.get("content"), m.get("tool_calls")] for m in messages]
    stack.extend(tools)
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total

"""A session's chat token histories ("segments"), and which one a request extends.

A segment is one conversation as the actor's rollouts hold it: a `History` (actors/context.py)
whose instruction is rendered with the chat template, whose actions are the exact sampled ids,
and whose later messages are rendered incrementally after each action; the step's context is
the actor's context builder over it, so a chat call sees exactly what a rollout step would.
Beside it, `seen`: the canonical messages (chat.py) the history covers, our own answers
included as the response showed them.

A request extends a segment when the segment is idle, the tools are the same, the request's
messages begin with `seen` and what follows holds no assistant message (new user, tool or
system messages only). Then only the new messages are rendered and appended: the previous
turns' tokens are never re-tokenized. Otherwise the request starts a new segment whose
instruction is the whole conversation, rendered at once; when the session already had a
segment this is a divergence: counted, flagged in the response, and recorded as a step whose
context does not extend the previous one (the learner then trains it as a sequence of its
own, never as if continuous).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_r1_async.actors.context import History


@dataclass
class Segment:
    index: int
    history: History
    tools: list[dict[str, Any]]
    seen: list[dict[str, Any]] = field(default_factory=list)
    busy: bool = False
    """A call is generating on it: nothing can extend it until its answer exists."""
    dead: bool = False
    """A call on it failed after its history changed: it is never extended again."""

    def extension(self, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The messages a request adds to this segment, or None when it does not extend it."""
        if self.busy or self.dead or tools != self.tools:
            return None
        n = len(self.seen)
        if len(messages) <= n or messages[:n] != self.seen:
            return None
        new = messages[n:]
        return None if any(m["role"] == "assistant" for m in new) else new


class Segments:
    """The segments of one session, in creation order."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.all: list[Segment] = []
        self.divergences = 0

    def place(self, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]]) -> tuple[Segment, bool]:
        """The segment this request's call generates on (marked busy), and whether it is a
        new segment after a divergence. The template's errors propagate (as ValueError)."""
        best: tuple[Segment, list[dict[str, Any]]] | None = None
        for seg in self.all:
            new = seg.extension(messages, tools)
            if new is not None and (best is None or len(seg.seen) > len(best[0].seen)):
                best = (seg, new)
        if best is not None:
            seg, new = best
            seg.busy = True
            try:
                seg.history.add_messages(new)
            except Exception:
                seg.dead = True
                raise
            seg.seen = list(messages)
            return seg, False
        history = History(self.tokenizer)
        history.add_messages(list(messages), tools)
        diverged = bool(self.all)
        self.divergences += diverged
        seg = Segment(len(self.all), history, list(tools), list(messages), busy=True)
        self.all.append(seg)
        return seg, diverged

    @staticmethod
    def answered(seg: Segment, action_ids: list[int], answer: dict[str, Any]) -> None:
        """The call on `seg` sampled `action_ids`, shown to the client as `answer`."""
        seg.history.add_action(action_ids)
        seg.seen.append(answer)
        seg.busy = False

    @staticmethod
    def failed(seg: Segment) -> None:
        seg.busy, seg.dead = False, True

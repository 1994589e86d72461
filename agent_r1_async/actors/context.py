"""Step-level context: the interaction history as token segments, and builders that pick the
segments a step's context is made of (Agent-R1: the state is the whole history; what the
model *sees* is built from it).

Invariants:
- An action is stored as the EXACT token ids the engine sampled, never decoded and
  re-encoded (re-tokenizing silently changes tokens and poisons log-prob ratios).
- Messages (instruction, tool responses) are rendered with the tokenizer's own chat template.
  Each `add_messages` call is rendered *incrementally*: the template is applied to a fixed
  dummy conversation with and without the new messages and the text difference is tokenized.
  For templates whose turns are separated by special tokens (ChatML, Llama 3) segment ids
  concatenate to exactly what `apply_chat_template` gives for the whole conversation (tested
  for SmolLM2), because BPE never merges across a special token.
- Tools: the env's tool schemas (`Observation.tools` at reset) are rendered by the chat
  template itself (`apply_chat_template(..., tools=[...])`, as Qwen2.5/3, Llama 3.x and Hermes
  templates do) when it supports them; for a template that ignores `tools` (SmolLM2's ChatML)
  the same schemas go into the system message as a text block (`tools_text`). Either way they
  are part of the instruction ids, so recorded contexts are exactly what the model saw.
- A turn's closing tokens (ChatML: "<|im_end|>\\n") are added in the *context*, after the
  action: only the part the action lacks ("\\n" when it ended with <|im_end|>, all of it when
  generation stopped at the length limit).

Builders: `full` (everything), `last_k` (instruction + last k turns), `truncate` (instruction +
as many of the newest turns as fit `max_tokens`, counting the generation prompt).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_r1_async.config import ContextConfig
from agent_r1_async.envs.base import Message

PROMPT_LAYOUT = 2
"""Bumped when what the model sees changes for the same config (2: tool schemas shown);
part of the warm-start cache key, so a cached checkpoint never meets a prompt it was not
trained on."""
_MARK = "\u2063AR1MARK\u2063"  # a string no template rewrites and no real message contains
_DUMMY: list[Message] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
]
_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_ar1", "description": "d", "parameters": {"type": "object"}}}


def tools_text(tools: list[dict[str, Any]]) -> str:
    """The fallback tool block for templates without tool support (Hermes-style signatures)."""
    sigs = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return ("You can call these tools (one JSON signature per line):\n<tools>\n" + sigs
            + '\n</tools>\nCall one as <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.')


def with_tools_text(messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
    """`messages` with the tool block appended to the system message (or as a new one)."""
    block = tools_text(tools)
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{block}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


class _Template:
    """Pieces of a chat template measured once per tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        base = self.render(_DUMMY)
        with_prompt = self.render(_DUMMY, generation_prompt=True)
        self.generation_prompt = self.encode(with_prompt[len(base):])
        with_asst = self.render([*_DUMMY, {"role": "assistant", "content": _MARK}])
        closing_text = with_asst[with_asst.index(_MARK) + len(_MARK):]
        self.closing = self.encode(closing_text)  # ChatML: [<|im_end|>, "\n"]
        # The prefix the messages after an action are rendered against (ends with a closed turn).
        self.after_action: list[Message] = [*_DUMMY, {"role": "assistant", "content": "a"}]
        self.native_tools = "probe_tool_ar1" in self.render(_DUMMY, tools=[_PROBE_TOOL])
        """The template renders `tools=` itself (else: the text block in the system message)."""

    def render(
        self, messages: list[Message], generation_prompt: bool = False,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        extra = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **extra
        )

    def render_instruction(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
        """The instruction's ids, the tools rendered by the template or as the text block."""
        if tools and not self.native_tools:
            messages, tools = with_tools_text(messages, tools), []
        return self.encode(self.render(messages, tools=tools))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render_delta(self, prefix: list[Message], messages: list[Message]) -> list[int]:
        head = self.render(prefix) if prefix else ""
        whole = self.render([*prefix, *messages])
        if not whole.startswith(head):
            raise ValueError(
                "the chat template is not incremental: rendering more messages changed the text "
                "of earlier ones, so per-step segments cannot be computed"
            )
        return self.encode(whole[len(head):])

    def close_ids(self, action_ids: list[int]) -> list[int]:
        """The tokens that close an assistant turn after `action_ids` in the context."""
        c = self.closing
        if c and action_ids and action_ids[-1] == c[0]:
            return c[1:]
        return c


@dataclass
class Turn:
    """One agent turn: the generation prompt it was sampled after, the sampled action, the ids
    closing it, and the env's answer."""

    prompt_ids: list[int]
    action_ids: list[int]
    close_ids: list[int]
    observation_ids: list[int] = field(default_factory=list)

    def ids(self) -> list[int]:
        return [*self.prompt_ids, *self.action_ids, *self.close_ids, *self.observation_ids]

    def __len__(self) -> int:
        return (
            len(self.prompt_ids) + len(self.action_ids) + len(self.close_ids)
            + len(self.observation_ids)
        )


class History:
    """The interaction history of one episode as token segments."""

    def __init__(self, tokenizer: Any) -> None:
        self.template = _Template(tokenizer)
        self.instruction_ids: list[int] = []
        self.messages: list[Message] = []
        """The rendered messages, for logging (actions are not in here)."""
        self.tools: list[dict[str, Any]] = []
        """Tool schemas shown with the instruction."""
        self.turns: list[Turn] = []

    def add_messages(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> None:
        """Append instruction / observation messages (rendered with the chat template);
        `tools` (before the first action only) are shown with the instruction."""
        if tools and self.turns:
            raise ValueError("tools can only be given with the instruction (before any action)")
        self.tools.extend(tools or [])
        if not messages:
            return
        self.messages.extend(messages)
        if not self.turns:
            # Before the first action: all messages so far form the instruction.
            self.instruction_ids = self.template.render_instruction(list(self.messages), self.tools)
        else:
            ids = self.template.render_delta(self.template.after_action, messages)
            self.turns[-1].observation_ids.extend(ids)

    def add_action(self, action_ids: list[int]) -> None:
        """Append an action exactly as sampled."""
        if not self.instruction_ids:
            raise ValueError("History.add_action before any instruction messages")
        ids = list(action_ids)
        self.turns.append(Turn(self.generation_prompt, ids, self.template.close_ids(ids)))

    @property
    def generation_prompt(self) -> list[int]:
        return self.template.generation_prompt

    def full_ids(self) -> list[int]:
        """Every segment in order (without the generation prompt)."""
        return [*self.instruction_ids, *(i for t in self.turns for i in t.ids())]


class ContextBuilder(Protocol):
    def build(self, history: History) -> list[int]: ...


def _assemble(history: History, turns: list[Turn]) -> list[int]:
    ids = list(history.instruction_ids)
    for t in turns:
        ids.extend(t.ids())
    ids.extend(history.generation_prompt)
    return ids


class FullContext:
    """The whole history."""

    def build(self, history: History) -> list[int]:
        return _assemble(history, history.turns)


class LastKContext:
    """The instruction plus the last `k` turns."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"last_k must be >= 1, got {k}")
        self.k = k

    def build(self, history: History) -> list[int]:
        return _assemble(history, history.turns[-self.k:])


class TruncateContext:
    """The instruction plus the newest turns that fit `max_tokens` (oldest dropped first).

    The instruction is always kept, even when it alone exceeds the budget (the engine then
    refuses the context and the actor ends the episode); a turn is kept whole or not at all.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    def build(self, history: History) -> list[int]:
        budget = self.max_tokens - len(history.instruction_ids) - len(history.generation_prompt)
        kept = 0
        for t in reversed(history.turns):
            if len(t) > budget:
                break
            budget -= len(t)
            kept += 1
        return _assemble(history, history.turns[len(history.turns) - kept:])


def make_context_builder(cfg: ContextConfig, tokenizer: Any = None) -> ContextBuilder:
    """The builder `cfg.builder` names (the tokenizer lives in the History)."""
    if cfg.builder == "full":
        return FullContext()
    if cfg.builder == "last_k":
        return LastKContext(cfg.last_k)
    if cfg.builder == "truncate":
        return TruncateContext(cfg.max_tokens)
    raise ValueError(f"context.builder: unknown builder {cfg.builder!r} (full, last_k, truncate)")

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
as many of the newest turns as fit `max_tokens`, counting the generation prompt; with
`truncate_to`, cut lower so that the next contexts extend each other until the next cut), `compact`
(everything until the next context would exceed `max_tokens`; then the agent writes a summary
and later contexts are the instruction, the summary and the turns since: `CompactContext`).
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


@dataclass
class Summary:
    """A summary the agent wrote of the history before it (`CompactContext`)."""

    at: int
    """The turns it folds: it was written after `History.turns[:at]`."""
    request_ids: list[int]
    """The compaction request (a user turn) it answers; shown only in the summary step's context."""
    turn: Turn
    """An assistant turn: the generation prompt, the summary ids exactly as sampled, the closing
    ids, then (`observation_ids`) the env's last answer before the summary when it is kept."""
    carried: int = 0
    """The leading `turn.observation_ids` that repeat that answer."""


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
        self.summaries: list[Summary] = []
        """Summaries the agent wrote (`CompactContext`), oldest first."""
        self._since_action: list[Message] = []
        """The messages added since the last action (what a compaction request follows)."""

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
            self.newest_turn.observation_ids.extend(ids)
            self._since_action.extend(messages)

    def add_action(self, action_ids: list[int]) -> None:
        """Append an action exactly as sampled."""
        if not self.instruction_ids:
            raise ValueError("History.add_action before any instruction messages")
        ids = list(action_ids)
        self.turns.append(Turn(self.generation_prompt, ids, self.template.close_ids(ids)))
        self._since_action = []

    def request_ids(self, text: str) -> list[int]:
        """`text` as a user turn after the newest messages (a compaction request), rendered
        against them so that a template whose turn boundaries depend on the previous role
        renders it as it would in the whole conversation."""
        return self.template.render_delta(
            [*self.template.after_action, *self._since_action], [{"role": "user", "content": text}])

    def add_summary(self, request_ids: list[int], summary_ids: list[int], carry: bool) -> None:
        """Append a summary exactly as sampled, written in answer to `request_ids` after the
        newest turn; `carry`: the newest turn's env answer follows the summary in later
        contexts (the message the next action answers)."""
        if not self.turns or self.turns_since_summary() == 0:
            raise ValueError("History.add_summary with no turn since the last summary")
        ids = list(summary_ids)
        carried = list(self.turns[-1].observation_ids) if carry else []
        turn = Turn(self.generation_prompt, ids, self.template.close_ids(ids), carried)
        self.summaries.append(Summary(len(self.turns), list(request_ids), turn, len(carried)))

    def turns_since_summary(self) -> int:
        return len(self.turns) - (self.summaries[-1].at if self.summaries else 0)

    @property
    def newest_turn(self) -> Turn:
        """The turn that new messages follow: the newest action's, or the newest summary's when
        no action came after it."""
        if self.summaries and self.summaries[-1].at == len(self.turns):
            return self.summaries[-1].turn
        return self.turns[-1]

    @property
    def generation_prompt(self) -> list[int]:
        return self.template.generation_prompt

    def full_ids(self) -> list[int]:
        """Every segment in order (without the generation prompt): with summaries, each one's
        request and summary after the turns it folds (a carried answer is not repeated)."""
        ids = list(self.instruction_ids)
        at = {s.at: s for s in self.summaries}
        for n, turn in enumerate(self.turns, 1):
            ids.extend(turn.ids())
            if n in at:
                s = at[n]
                ids += [*s.request_ids, *s.turn.prompt_ids, *s.turn.action_ids,
                        *s.turn.close_ids, *s.turn.observation_ids[s.carried:]]
        return ids


class ContextBuilder(Protocol):
    def build(self, history: History) -> list[int]: ...


def _assemble(history: History, turns: list[Turn], prompt: bool = True) -> list[int]:
    ids = list(history.instruction_ids)
    for t in turns:
        ids.extend(t.ids())
    if prompt:
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

    With `truncate_to` below `max_tokens`, a cut drops the oldest turns until the context fits
    `truncate_to`, and the next steps keep that first turn until their context exceeds
    `max_tokens` again: between two cuts each context extends the previous one plus its action,
    so the engine reuses its prefix cache, the records are deltas and the learner packs the
    steps into one sequence. The first kept turn is a function of the turns' lengths alone
    (`first_kept`, replayed from the first turn), so a demonstration rendered afterwards sees
    the contexts the episode saw. When the instruction and the newest turn alone exceed
    `truncate_to`, that cut keeps what fits `max_tokens`. `truncate_to` 0 or equal to
    `max_tokens` cuts to fit at every step.

    The instruction is always kept, even when it alone exceeds the budget (the engine then
    refuses the context and the actor ends the episode); a turn is kept whole or not at all.
    """

    def __init__(self, max_tokens: int, truncate_to: int = 0) -> None:
        if not 0 <= truncate_to <= max_tokens:
            raise ValueError(f"truncate_to must be in [0, {max_tokens}], got {truncate_to}")
        self.max_tokens = max_tokens
        self.truncate_to = truncate_to or max_tokens

    def first_kept(self, history: History) -> int:
        """Index of the oldest turn in the context built after every turn of `history`."""
        fixed = len(history.instruction_ids) + len(history.generation_prompt)
        lengths = [len(t) for t in history.turns]
        first, used = 0, fixed
        for n, length in enumerate(lengths):
            used += length
            if used <= self.max_tokens:
                continue
            target = self.truncate_to if fixed + length <= self.truncate_to else self.max_tokens
            while first <= n and used > target:
                used -= lengths[first]
                first += 1
        return first

    def build(self, history: History) -> list[int]:
        return _assemble(history, history.turns[self.first_kept(history):])


class CompactContext:
    """The whole history until it outgrows `max_tokens`; then the agent writes a summary of it,
    and later contexts are [instruction, summary, the env's last answer, the turns since].

    - Trigger (`due`): the next context (generation prompt included) would exceed
      `max_tokens` and at least one turn came since the last summary (a summary is never
      asked to summarize only itself).
    - The summary step (`summary_context`): the context the next action would have seen, with
      the request (`summary_prompt`, a user turn rendered by the chat template) before the
      generation prompt. Its context extends the previous step's, like any step's. The summary
      is an action: the rollout samples it (at most `summary_max_tokens`), records it and the
      learner trains it; it never reaches the env.
    - After it (`add_summary`): the summary is an assistant turn of its own (the generation
      prompt, the sampled ids, the turn's closing ids: an action's layout, so the chat template
      renders [system, task, assistant summary, ...] to the same tokens), followed by the env's
      last answer before it, kept verbatim when the context then still fits `max_tokens` (it is
      what the next action answers; without it the summary has to carry it). The compaction
      request is not shown again, and an earlier summary is folded into the new one.
    """

    def __init__(self, max_tokens: int, summary_prompt: str, summary_max_tokens: int) -> None:
        if summary_max_tokens < 1:
            raise ValueError(f"context.summary_max_tokens must be >= 1, got {summary_max_tokens}")
        self.max_tokens = max_tokens
        self.summary_prompt = summary_prompt
        self.summary_max_tokens = summary_max_tokens

    @staticmethod
    def _segments(history: History) -> list[Turn]:
        if not history.summaries:
            return history.turns
        s = history.summaries[-1]
        return [s.turn, *history.turns[s.at:]]

    def build(self, history: History) -> list[int]:
        return _assemble(history, self._segments(history))

    def due(self, history: History) -> bool:
        """A summary comes before the next action."""
        return (history.turns_since_summary() > 0
                and len(self.build(history)) > self.max_tokens)

    def summary_context(self, history: History) -> list[int]:
        """The summary step's context: the current context with the request before the
        generation prompt."""
        return [*_assemble(history, self._segments(history), prompt=False),
                *history.request_ids(self.summary_prompt), *history.generation_prompt]

    def add_summary(self, history: History, summary_ids: list[int]) -> None:
        """Fold the history into the sampled summary (see the class doc for the layout)."""
        close = history.template.close_ids(list(summary_ids))
        answer = history.turns[-1].observation_ids if history.turns else []
        # The next context with the answer kept: instruction, summary turn, generation prompt.
        kept = (len(history.instruction_ids) + 2 * len(history.generation_prompt)
                + len(summary_ids) + len(close) + len(answer))
        history.add_summary(history.request_ids(self.summary_prompt), list(summary_ids),
                            carry=kept <= self.max_tokens)

    def request_len(self, tokenizer: Any) -> int:
        """Tokens the compaction request adds to a context (after an env answer)."""
        return len(History(tokenizer).request_ids(self.summary_prompt))

    def room_problem(self, tokenizer: Any, max_model_len: int) -> str:
        """Why a context at the budget, the request and a whole summary would not fit
        `max_model_len` (one summary step), or ""."""
        request = self.request_len(tokenizer)
        need = self.max_tokens + request + self.summary_max_tokens
        if need <= max_model_len:
            return ""
        return (f"context.max_tokens: context.max_tokens ({self.max_tokens}) + the compaction "
                f"request ({request} tokens, context.summary_prompt) + "
                f"context.summary_max_tokens ({self.summary_max_tokens}) = {need} must fit in "
                f"model.max_model_len ({max_model_len})")


def make_context_builder(cfg: ContextConfig, tokenizer: Any = None) -> ContextBuilder:
    """The builder `cfg.builder` names (the tokenizer lives in the History)."""
    if cfg.builder == "full":
        return FullContext()
    if cfg.builder == "last_k":
        return LastKContext(cfg.last_k)
    if cfg.builder == "truncate":
        return TruncateContext(cfg.max_tokens, cfg.truncate_to)
    if cfg.builder == "compact":
        return CompactContext(cfg.max_tokens, cfg.summary_prompt, cfg.summary_max_tokens)
    raise ValueError(
        f"context.builder: unknown builder {cfg.builder!r} (full, last_k, truncate, compact)")

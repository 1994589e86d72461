"""Demonstrations in the actors' step-level token layout (context ids, action ids per step).

Design choice: a demonstration is built by the *same* machinery an actor records with — a
`History` over the chat template and the configured context builder — with the demonstrated
action standing in for the engine's sample. So a demonstration step is exactly the
`(context_ids, action_ids)` a rollout would have recorded had the engine sampled that
action, and SFT trains the very token layout RL later trains on:

- `action_ids` = the action text tokenized (no special tokens added) + the end-of-turn token
  (`tokenizer.eos_token_id`, `<|im_end|>` for ChatML), exactly as an engine that stopped on
  eos returns it; the eos is trained too (it is the decision to end the turn);
- the context is `builder.build(history)` before the action, ending with the generation
  prompt; the turn's closing "\\n" and the observation follow in the *next* step's context;
- under `context.builder: compact`, when a summary is due before an action (the rollout's
  rule), the env's `state_summary()` (optional; the `world` env has one) is the demonstrated
  summary: a summary step exactly as a rollout records one (its context the history with the
  compaction request, its action the summary ids + eos, at most
  `context.summary_max_tokens`), folded into the history for the steps after it. An env
  without `state_summary` gives demonstrations without summary steps: their contexts grow
  as under `full` (one longer than `model.max_model_len` is dropped as too long).

Two sources:
- `oracle_demos`: the env's `oracle(task)` actions replayed through a fresh env
  (`spec.make()`, `reset`, `step`), so observations are the env's real answers. The env sees
  the decoded action ids (`skip_special_tokens=True`), as in a rollout. A replay whose
  episode does not end with a positive outcome exactly when the oracle's actions run out is
  rejected (counted in `DemoStats`). An oracle action marked `Untrained` (envs/base.py: a
  deliberate mistake the env refuses, the world's `demo_detours`) is played and stays in the
  history, so the next steps' contexts show it and the env's answer, but it is no step of
  its own: the warm start trains the recovery, never the mistake.
- `jsonl_demos`: chat transcripts, one `{"messages": [...], "tools": [...]}` object per line
  (`tools` optional: the OpenAI-style schemas, shown with the instruction). Assistant
  messages are actions, every other message is observation. OpenAI-style assistant
  `tool_calls` are rendered as `<tool_call>{...}</tool_call>` text (the Hermes format the
  envs parse). `tool` messages are, by default, rendered as the ToolEnv renders tool output:
  consecutive ones become ONE user message of `<tool_response>` blocks, so a transcript of
  an env's episode gives the same tokens the env produces at RL time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_r1_async.actors.context import CompactContext, ContextBuilder, History
from agent_r1_async.envs.base import (
    Message,
    Observation,
    StepResult,
    Task,
    Untrained,
    demo_tasks,
)
from agent_r1_async.envs.toolenv import ToolCall, tool_call_text


class DemoError(ValueError):
    """A demonstration that cannot be used; the message says where and why."""


@dataclass
class DemoStep:
    """One step as an actor records it: what the model saw, what it (should have) emitted."""

    context_ids: list[int]
    action_ids: list[int]


@dataclass
class Demonstration:
    source: str
    """Task id (oracle) or `path:line` (JSONL)."""
    steps: list[DemoStep]
    outcome_reward: float | None = None
    """The env's outcome reward of the replay (oracle only)."""
    summaries: int = 0
    """Summary steps among `steps` (`context.builder: compact`)."""

    @property
    def num_tokens(self) -> int:
        return sum(len(s.context_ids) + len(s.action_ids) for s in self.steps)


@dataclass
class DemoStats:
    """Why demonstrations were dropped."""

    kept: int = 0
    no_oracle: int = 0
    failed: int = 0
    """Oracle replays that did not end, or ended without a positive outcome, on their last action."""
    too_long: int = 0
    """Steps that do not fit `model.max_model_len` (a rollout would have truncated them)."""
    summaries: int = 0
    """Summary steps of the kept demonstrations (`context.builder: compact`)."""
    reasons: list[str] = field(default_factory=list)


def end_of_turn_id(tokenizer: Any) -> int:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DemoError("the tokenizer has no eos token: cannot mark where an action ends")
    return int(eos)


def encode_action(tokenizer: Any, text: str) -> list[int]:
    """Action ids as an engine stopping on eos returns them: text tokens + eos."""
    return [*tokenizer.encode(text, add_special_tokens=False), end_of_turn_id(tokenizer)]


class DemoRecorder:
    """Builds one demonstration step by step, like a rollout builds its records."""

    def __init__(self, tokenizer: Any, builder: ContextBuilder) -> None:
        self.tokenizer = tokenizer
        self.builder = builder
        self.history = History(tokenizer)
        self.steps: list[DemoStep] = []
        self.summaries = 0

    def observe(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> None:
        self.history.add_messages(messages, tools)

    def act(self, text: str, summary: Callable[[], str] | None = None,
            trained: bool = True) -> str:
        """Record `text` as the next action; returns the text the env sees (decoded ids).

        `summary` (the env's `state_summary`): under a `compact` builder, a summary step of
        its text comes first when one is due. `trained=False`: the action joins the history
        (later contexts show it) but is no step of its own, so no loss falls on it."""
        compact = self.builder if isinstance(self.builder, CompactContext) else None
        if compact is not None and summary is not None and compact.due(self.history):
            try:
                text_of_summary = summary()
            except Exception as e:
                raise DemoError(f"env.state_summary: {type(e).__name__}: {e}") from None
            self.summarize(compact, text_of_summary)
        action = encode_action(self.tokenizer, text)
        if trained:
            self.steps.append(DemoStep(self.builder.build(self.history), action))
        self.history.add_action(action)
        return self.tokenizer.decode(action, skip_special_tokens=True)

    def summarize(self, compact: CompactContext, text: str) -> None:
        """Record `text` as a summary step and fold the history into it."""
        if not isinstance(text, str) or not text.strip():
            raise DemoError(f"env.state_summary returned {text!r}, not a summary text")
        ids = encode_action(self.tokenizer, text)
        if len(ids) > compact.summary_max_tokens:
            raise DemoError(f"the oracle summary has {len(ids)} tokens, above "
                            f"context.summary_max_tokens ({compact.summary_max_tokens})")
        context = compact.summary_context(self.history)
        compact.add_summary(self.history, ids)
        self.steps.append(DemoStep(context, ids))
        self.summaries += 1


# --------------------------------------------------------------------------------------
# Oracle replays
# --------------------------------------------------------------------------------------


async def replay_oracle(
    spec: Any, task: Task, tokenizer: Any, builder: ContextBuilder
) -> Demonstration | None:
    """Replay `spec.oracle(task)` through a fresh env; None if the env has no oracle for it.

    Raises DemoError when the replay does not end on the oracle's last action.
    """
    actions = spec.oracle(task)
    if actions is None:
        return None
    if not actions:
        raise DemoError(f"{task.task_id}: the oracle returned no actions")
    env = spec.make()
    summary = getattr(env, "state_summary", None)
    rec = DemoRecorder(tokenizer, builder)
    obs = await env.reset(task)
    if not isinstance(obs, Observation):
        raise DemoError(f"{task.task_id}: env.reset returned {type(obs).__name__}")
    rec.observe(obs.messages, obs.tools)
    result: StepResult | None = None
    for i, text in enumerate(actions):
        if result is not None:
            if result.done:
                raise DemoError(
                    f"{task.task_id}: the episode ended after oracle action {i} of {len(actions)}"
                )
            rec.observe(result.observation.messages)
        try:
            action = rec.act(text, summary if callable(summary) else None,
                             trained=not isinstance(text, Untrained))
        except DemoError as e:
            raise DemoError(f"{task.task_id}: {e}") from None
        result = await env.step(action)
    assert result is not None
    if not result.done:
        raise DemoError(f"{task.task_id}: the episode did not end after the oracle's actions")
    return Demonstration(task.task_id, rec.steps, float(result.outcome_reward), rec.summaries)


def oracle_demos(
    spec: Any, tasks: Sequence[Task], tokenizer: Any, builder: ContextBuilder,
    max_model_len: int, limit: int = 0, stats: DemoStats | None = None,
) -> list[Demonstration]:
    """Successful oracle replays of `tasks` (in order) until `limit` are kept (0 = all)."""
    stats = stats if stats is not None else DemoStats()

    async def collect() -> list[Demonstration]:
        out: list[Demonstration] = []
        for task in tasks:
            if limit and len(out) >= limit:
                break
            try:
                demo = await replay_oracle(spec, task, tokenizer, builder)
            except DemoError as e:
                stats.failed += 1
                stats.reasons.append(str(e))
                continue
            if demo is None:
                stats.no_oracle += 1
                continue
            if not demo.outcome_reward or demo.outcome_reward <= 0:
                stats.failed += 1
                stats.reasons.append(f"{task.task_id}: outcome reward {demo.outcome_reward}")
                continue
            if _keep(demo, max_model_len, stats):
                out.append(demo)
        return out

    demos = asyncio.run(collect())
    if not demos:
        name = getattr(spec, "name", "env")
        raise DemoError(
            f"env {name!r}: no usable oracle demonstrations (no oracle for {stats.no_oracle}, "
            f"failed {stats.failed}, too long {stats.too_long}); first: {stats.reasons[:1]}"
        )
    return demos


def _keep(demo: Demonstration, max_model_len: int, stats: DemoStats) -> bool:
    if any(len(s.context_ids) + len(s.action_ids) > max_model_len for s in demo.steps):
        stats.too_long += 1
        stats.reasons.append(f"{demo.source}: a step exceeds model.max_model_len={max_model_len}")
        return False
    stats.kept += 1
    stats.summaries += demo.summaries
    return True


# --------------------------------------------------------------------------------------
# Chat transcripts
# --------------------------------------------------------------------------------------


def _text(content: Any, where: str) -> str:
    """Message content as text: a string, None, or OpenAI content parts of type text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise DemoError(f"{where}: only text content parts are supported, got {part!r}")
            parts.append(part["text"])
        return "".join(parts)
    raise DemoError(f"{where}: content must be a string, got {type(content).__name__}")


def render_tool_calls(tool_calls: Any, where: str) -> list[str]:
    """OpenAI `tool_calls` → one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` each."""
    if not isinstance(tool_calls, list):
        raise DemoError(f"{where}: tool_calls must be a list")
    out = []
    for j, tc in enumerate(tool_calls):
        at = f"{where}.tool_calls[{j}]"
        fn = tc.get("function", tc) if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise DemoError(f"{at}: expected {{'function': {{'name': ..., 'arguments': ...}}}}")
        args = fn.get("arguments", {})
        if isinstance(args, str):  # OpenAI encodes arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as e:
                raise DemoError(f"{at}: arguments are not JSON ({e.msg})") from None
        if not isinstance(args, dict):
            raise DemoError(f"{at}: arguments must be a JSON object")
        out.append(tool_call_text(ToolCall(fn["name"], args)))
    return out


def assistant_text(message: dict[str, Any], where: str) -> str:
    """The action text of an assistant message: its content, then its tool calls (one a line)."""
    parts = [_text(message.get("content"), where)]
    if message.get("tool_calls"):
        parts += render_tool_calls(message["tool_calls"], where)
    text = "\n".join(p for p in parts if p)
    if not text:
        raise DemoError(f"{where}: an assistant message with neither content nor tool_calls")
    return text


def _observations(messages: list[Message], tool_as_user: bool) -> list[Message]:
    """Observation messages; runs of `tool` messages become one ToolEnv-style user message."""
    if not tool_as_user:
        return messages
    out: list[Message] = []
    blocks: list[str] = []
    for m in [*messages, None]:
        if m is not None and m["role"] == "tool":
            blocks.append(f"<tool_response>\n{m['content']}\n</tool_response>")
            continue
        if blocks:
            out.append({"role": "user", "content": "\n".join(blocks)})
            blocks = []
        if m is not None:
            out.append(m)
    return out


def transcript_demo(
    messages: Any, tokenizer: Any, builder: ContextBuilder, source: str, tool_as_user: bool = True,
    tools: Any = None,
) -> Demonstration:
    """One chat transcript → one demonstration (one step per assistant message); `tools` (the
    transcript's OpenAI-style tool list) are shown with the instruction, as the env shows them."""
    if not isinstance(messages, list) or not messages:
        raise DemoError(f"{source}: 'messages' must be a non-empty list")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise DemoError(f"{source}: 'tools' must be a list of tool schemas")
    rec = DemoRecorder(tokenizer, builder)
    pending: list[Message] = []
    for i, m in enumerate(messages):
        where = f"{source}: messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise DemoError(f"{where}: expected an object with a 'role'")
        if m["role"] != "assistant":
            pending.append({"role": m["role"], "content": _text(m.get("content"), where)})
            continue
        if not rec.steps and not pending:
            raise DemoError(f"{where}: the first assistant message has no instruction before it")
        rec.observe(_observations(pending, tool_as_user), None if rec.steps else tools)
        pending = []
        rec.act(assistant_text(m, where))
    if not rec.steps:
        raise DemoError(f"{source}: no assistant message (nothing to learn)")
    return Demonstration(source, rec.steps)  # trailing observations are never trained on


def read_transcripts(path: str | Path) -> Iterable[tuple[str, Any, Any]]:
    """(`path:line`, messages, tools or None) for each non-empty line of a JSONL file."""
    p = Path(path)
    if not p.is_file():
        raise DemoError(f"sft.jsonl_path: {str(p)!r} does not exist")
    with p.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DemoError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or "messages" not in obj:
                raise DemoError(f"{where}: expected an object with a 'messages' list")
            yield where, obj["messages"], obj.get("tools")


def jsonl_demos(
    path: str | Path, tokenizer: Any, builder: ContextBuilder, max_model_len: int,
    limit: int = 0, stats: DemoStats | None = None, tool_as_user: bool = True,
    seed: int = -1, offset: int = 0,
) -> list[Demonstration]:
    """Demonstrations from a JSONL transcript file until `limit` are kept (0 = all), its lines
    drawn in the order oracle demonstrations draw train tasks (`demo_tasks`: the file's order
    at `seed` -1, else a random order drawn with `seed`; the first `offset` skipped)."""
    stats = stats if stats is not None else DemoStats()
    out: list[Demonstration] = []
    lines = demo_tasks(list(read_transcripts(path)), seed, offset)
    if not lines:
        raise DemoError(f"{path}: no transcripts after skipping the first {offset} "
                        "(sft.demo_offset)")
    for where, messages, tools in lines:
        if limit and len(out) >= limit:
            break
        demo = transcript_demo(messages, tokenizer, builder, where, tool_as_user, tools)
        if _keep(demo, max_model_len, stats):
            out.append(demo)
    if not out:
        raise DemoError(f"{path}: no usable transcripts (too long: {stats.too_long})")
    return out

"""ToolEnv: the env that *interprets* tool-using actions (Agent-R1's ToolEnv), by composition.

A `ToolEnv` is built from a `ToolDomain` (the tools, the system prompt, the outcome scoring and
the process-reward hook of one task family) plus episode limits. Each `step(action)`:

1. parses every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the action
   (Hermes/Qwen convention; several per action). Malformed JSON, an unknown tool or arguments
   that fail the tool's JSON schema become an error *tool response* and a format penalty,
   never an exception;
2. runs the valid calls concurrently, each on a worker thread under `tool_timeout_s`
   (offload.py: a tool that blocks in synchronous code is cut at the timeout too).
   A tool that raises, hangs or returns something that is not JSON-like yields an error
   response for that call; the other calls and the episode go on;
3. answers with ONE user message holding one `<tool_response>...</tool_response>` block per
   call, in call order;
4. ends the episode on `<answer>...</answer>` (scored by the domain), on an action with no
   tool call at all (scored as no answer), or after `max_turns` actions (truncated).

Why tool responses are `user` messages: SmolLM2's ChatML template renders any role verbatim,
and a `tool` role is a header the 135M model never saw in training; Qwen2.5's own template
renders `tool` messages as a `user` turn wrapped in `<tool_response>` tags. Sending
`{"role": "user", "content": "<tool_response>...</tool_response>"}` therefore gives the exact
Qwen token layout and a familiar turn header for SmolLM2.

Failures of the env's own logic (a domain hook raising, a hook returning a wrong type or a
reward that is not a finite number: envs/contract.py) raise `EnvError`; the actor records the
episode with status "env_error". A *tool* that raises is not one: see step 2.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from agent_r1_async.envs import contract
from agent_r1_async.envs.base import EnvError, Message, Observation, StepResult, Task, Tool
from agent_r1_async.envs.canaries import canary_metrics
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.envs.rewards import extract_answer

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_CALL_FORMAT = '<tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>'


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """A syntactically valid call (not yet checked against a tool's schema)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CallError:
    """A `<tool_call>` block that could not be read; `message` is shown to the agent."""

    message: str


def _parse_body(obj: Any) -> ToolCall | CallError:
    if not isinstance(obj, dict):
        return CallError(f"a tool call must be a JSON object like {_CALL_FORMAT}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return CallError('the tool call has no "name" string')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI style: arguments as a JSON-encoded string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return CallError(f'"arguments" of {name} is a string that is not JSON')
    if not isinstance(args, dict):
        return CallError(f'"arguments" of {name} must be a JSON object')
    return ToolCall(name, args)


def parse_tool_calls(text: str) -> list[ToolCall | CallError]:
    """All `<tool_call>` blocks of an action, in order.

    The body is read with `raw_decode`, so nested objects and strings that contain
    "</tool_call>" parse correctly; a block without its closing tag is an error.
    """
    decoder = json.JSONDecoder()
    out: list[ToolCall | CallError] = []
    pos = text.find(_OPEN)
    while pos != -1:
        start = _skip_ws(text, pos + len(_OPEN))
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            where = e.pos - start
            out.append(CallError(f"the tool call is not valid JSON ({e.msg} at char {where})"))
            close = text.find(_CLOSE, start)
            pos = text.find(_OPEN, close + len(_CLOSE)) if close != -1 else -1
            continue
        after = _skip_ws(text, end)
        if not text.startswith(_CLOSE, after):
            out.append(CallError(f"the tool call is not closed with {_CLOSE}"))
            pos = text.find(_OPEN, end)
            continue
        out.append(_parse_body(obj))
        pos = text.find(_OPEN, after + len(_CLOSE))
    return out


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(parameters: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Messages of every JSON-schema violation of `arguments` (empty when valid)."""
    validator = _validator(json.dumps(parameters, sort_keys=True))
    return [e.message for e in validator.iter_errors(arguments)]


# --------------------------------------------------------------------------------------
# Domain hooks and episode state
# --------------------------------------------------------------------------------------


@dataclass
class CallOutcome:
    """What happened to one call of an action (`error` is "" on success)."""

    call: ToolCall | None
    content: str
    """Text placed inside this call's <tool_response> block."""
    result: Any = None
    """The tool's raw result (successful calls only)."""
    error: str = ""
    """"", "parse", "unknown_tool", "schema", "too_many", "timeout", "exception" or "bad_type"."""


@dataclass
class Score:
    """The domain's verdict on a final answer."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class EpisodeState:
    """Per-episode state handed to domain hooks; `scratch` is theirs to keep things in."""

    task: Task
    turn: int = 0
    scratch: dict[str, Any] = field(default_factory=dict)


class ToolDomain(Protocol):
    """What a task family supplies to a ToolEnv.

    Optional: `process_reward(state, outcome) -> float` (per successful call; default 0),
    `format_result(call, result) -> str` (default: str as is, anything else as JSON) and
    `output_metrics(task, action) -> dict[str, float]` (metrics of the episode's last action,
    whatever its format; default none).
    """

    tools: Sequence[Tool]

    def system_prompt(self) -> str: ...

    def score(self, task: Task, answer: str | None) -> Score: ...


@dataclass(frozen=True)
class Shaping:
    """Format rewards the ToolEnv adds on top of the domain's."""

    valid_call: float = 0.0
    """Process reward, once per episode, for the first step whose calls are all well-formed."""
    invalid_call: float = -0.1
    """Process reward of a step with any malformed / unknown / schema-invalid call."""
    max_calls_per_action: int = 4
    """Calls past this many in one action get an error response and are not run."""


def default_format_result(call: ToolCall, result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def tool_call_text(call: ToolCall) -> str:
    """The action text of one call in the Hermes format (oracles and demonstrations)."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


def tool_schema(tool: Tool) -> dict[str, Any]:
    """A tool in the OpenAI function format that chat templates render (`tools=[...]`)."""
    return {"type": "function", "function": {
        "name": tool.name, "description": tool.description, "parameters": tool.parameters}}


def tool_prompt(tools: Sequence[Tool]) -> str:
    """The tool list in the Hermes/Qwen style: one JSON function signature per line."""
    sigs = [
        json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters})
        for t in tools
    ]
    return "<tools>\n" + "\n".join(sigs) + "\n</tools>"


# --------------------------------------------------------------------------------------
# The env
# --------------------------------------------------------------------------------------


class ToolEnv:
    """One episode of a tool-using task (implements the `Env` protocol)."""

    def __init__(
        self,
        domain: ToolDomain,
        *,
        max_turns: int,
        tool_timeout_s: float,
        shaping: Shaping = Shaping(),
    ) -> None:
        if max_turns < 1 or tool_timeout_s <= 0:
            raise ValueError("ToolEnv: max_turns must be >= 1 and tool_timeout_s > 0")
        self.domain = domain
        self.max_turns = max_turns
        self.tool_timeout_s = tool_timeout_s
        self.shaping = shaping
        self.tools: dict[str, Tool] = {t.name: t for t in domain.tools}
        self.state: EpisodeState | None = None
        self.done = False
        self._calls = self._errors = 0
        self._valid_paid = False
        self._responses: list[str] = []  # successful calls' texts (the copy canary)
        self._last_action = ""  # for the domain's optional output_metrics

    async def reset(self, task: Task) -> Observation:
        self.state = EpisodeState(task)
        self.done, self._calls, self._errors, self._valid_paid = False, 0, 0, False
        self._responses = []
        self._last_action = ""
        system = self._hook("system_prompt")
        if not isinstance(system, str):
            raise EnvError(f"system_prompt() returned {type(system).__name__}, expected str")
        return Observation(
            [{"role": "system", "content": system}, {"role": "user", "content": task.prompt}],
            tools=[tool_schema(t) for t in self.tools.values()],
        )

    async def step(self, action: str) -> StepResult:
        if self.state is None or self.done:
            raise EnvError("step() called before reset() or after the episode ended")
        state = self.state
        state.turn += 1
        self._last_action = action
        parsed = parse_tool_calls(action)
        answer = extract_answer(action)
        if answer is not None or not parsed:
            return self._finish(answer, reward=0.0, num_calls=0, truncated=False)
        outcomes = self._check(parsed)
        bad = sum(o.error != "" for o in outcomes)
        reward = self.shaping.invalid_call if bad else 0.0
        if not bad and not self._valid_paid:
            reward, self._valid_paid = self.shaping.valid_call, True
        self._calls += len(outcomes)
        if state.turn >= self.max_turns:  # out of turns: the calls are not run
            self._errors += bad
            return self._finish(None, reward=reward, num_calls=len(outcomes), truncated=True)
        await self._run(outcomes)
        self._errors += sum(o.error != "" for o in outcomes)
        reward += sum(self._process_reward(o) for o in outcomes if o.call and not o.error)
        self._responses += [o.content for o in outcomes if o.call and not o.error]
        blocks = [f"<tool_response>\n{o.content}\n</tool_response>" for o in outcomes]
        message: Message = {"role": "user", "content": "\n".join(blocks)}
        return StepResult(Observation([message]), reward, False, num_tool_calls=len(outcomes))

    # -- helpers ------------------------------------------------------------------------

    def _hook(self, name: str, *args: Any) -> Any:
        """Call a domain hook; its exceptions are env bugs, surfaced as EnvError."""
        try:
            return getattr(self.domain, name)(*args)
        except EnvError:
            raise
        except Exception as e:
            raise EnvError(f"{type(self.domain).__name__}.{name} failed: {e!r}") from e

    def _check(self, parsed: list[ToolCall | CallError]) -> list[CallOutcome]:
        """Turn parse results into outcomes; only calls left with error "" will run."""
        out: list[CallOutcome] = []
        for i, item in enumerate(parsed):
            if isinstance(item, CallError):
                out.append(CallOutcome(None, f"Error: {item.message}.", error="parse"))
            elif i >= self.shaping.max_calls_per_action:
                msg = f"Error: at most {self.shaping.max_calls_per_action} tool calls per turn."
                out.append(CallOutcome(item, msg, error="too_many"))
            elif item.name not in self.tools:
                known = ", ".join(self.tools)
                msg = f"Error: unknown tool {item.name!r}. Available tools: {known}."
                out.append(CallOutcome(item, msg, error="unknown_tool"))
            else:
                errs = schema_errors(self.tools[item.name].parameters, item.arguments)
                if errs:
                    msg = f"Error: invalid arguments for {item.name}: {'; '.join(errs)}."
                    out.append(CallOutcome(item, msg, error="schema"))
                else:
                    out.append(CallOutcome(item, ""))
        return out

    async def _run(self, outcomes: list[CallOutcome]) -> None:
        runnable = [o for o in outcomes if o.call is not None and o.error == ""]
        await asyncio.gather(*(self._run_one(o) for o in runnable))

    async def _run_one(self, outcome: CallOutcome) -> None:
        call = outcome.call
        assert call is not None
        try:  # on a worker thread: a tool blocking in sync code is still cut at the timeout
            tool = self.tools[call.name]
            result = await run_offloaded(
                lambda: tool.call(**call.arguments), self.tool_timeout_s,
                f"tool {call.name}",
            )
        except TimeoutError:
            outcome.error = "timeout"
            outcome.content = f"Error: {call.name} timed out after {self.tool_timeout_s:g} s."
            return
        except Exception as e:  # a tool bug is the agent's observation, not a crash
            outcome.error = "exception"
            outcome.content = f"Error: {call.name} failed: {type(e).__name__}: {e}"
            return
        if not isinstance(result, str | int | float | bool | list | dict | type(None)):
            outcome.error = "bad_type"
            kind = type(result).__name__
            outcome.content = f"Error: {call.name} returned an unsupported {kind}."
            return
        fmt = getattr(self.domain, "format_result", None)
        try:
            text = fmt(call, result) if fmt else default_format_result(call, result)
        except (TypeError, ValueError) as e:  # e.g. not JSON serializable
            outcome.error = "bad_type"
            outcome.content = f"Error: {call.name} returned a result that cannot be shown ({e})."
            return
        outcome.result, outcome.content = result, text

    def _process_reward(self, outcome: CallOutcome) -> float:
        if not hasattr(self.domain, "process_reward"):
            return 0.0
        value = self._hook("process_reward", self.state, outcome)
        return contract.real(value, f"{type(self.domain).__name__}.process_reward", "")

    def _finish(
        self, answer: str | None, *, reward: float, num_calls: int, truncated: bool
    ) -> StepResult:
        assert self.state is not None
        self.done = True
        score = self._hook("score", self.state.task, answer)
        domain = type(self.domain).__name__
        if not isinstance(score, Score):
            raise contract.EnvContractError(f"{domain}.score", "", score, "Score")
        outcome = contract.real(score.reward, f"{domain}.score", "Score.reward")
        metrics = {
            **contract.metrics(score.metrics, f"{domain}.score", "Score.metrics"),
            "format_ok": float(answer is not None),
            "turns": float(self.state.turn),
            "tool_calls": float(self._calls),
            "tool_errors": float(self._errors),
            "truncated": float(truncated),
            **canary_metrics(answer, outcome, self._responses),
        }
        if hasattr(self.domain, "output_metrics"):
            extra = self._hook("output_metrics", self.state.task, self._last_action)
            metrics.update(contract.metrics(extra, f"{domain}.output_metrics", "its result"))
        return StepResult(
            Observation([]), reward, True, outcome_reward=outcome,
            truncated=truncated, num_tool_calls=num_calls, metrics=metrics,
        )

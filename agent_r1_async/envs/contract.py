"""What an env may return: checked where its values enter the run, before anything is sent.

An env that *raises* fails its episode in one line. An env that *returns* a bad value must do
the same: a NaN outcome would reach the buffer (which refuses the record, so no group is ever
ready), a `None` reward would crash the actor's `float()`, a numeric string would be trained on
as a number. The rollout (actors/rollout.py) and `envs check` (check.py) therefore pass every
value an env returns through this module, and a violation is an `EnvContractError` naming the
method, the field and the value:

    env.step: StepResult.outcome_reward is nan, expected a finite real number

The rollout ends that episode as `env_error` (logged once, counted toward
`launch.stop_after_failed_episodes`, never fatal to the actor); `envs check` prints it as a
failure. The rules:

| value                                    | accepted                                          |
|------------------------------------------|---------------------------------------------------|
| `StepResult.reward`, `.outcome_reward`   | a real number: bool, int, float or a numpy scalar, |
|                                          | finite and within ±`MAX_ABS_REWARD` (a numeric     |
|                                          | string is refused); the outcome only when done    |
| `StepResult.done`, `.truncated`          | bool (numpy's too)                                |
| `StepResult.num_tool_calls`              | an int in [0, `MAX_COUNT`]                         |
| `StepResult.metrics`                     | str -> finite real number within ±`MAX_COUNT`,     |
|                                          | at most `MAX_METRICS` names per episode           |
| `StepResult.observation` (when not done) | an `Observation`                                   |
| `Observation.messages`                   | a list of dicts of str -> str with "role" and     |
|                                          | "content"; non-empty at reset                     |
| `Observation.tools` (read at reset)      | a list of JSON-serializable dicts, each naming    |
|                                          | its function (`{"type": "function", "function":   |
|                                          | {"name": ...}}` or `{"name": ...}`)               |
| the prompt (reset's messages and tools)  | fewer tokens than `model.max_model_len`           |

The numeric bounds are the schema's (wire/messages.py), which the buffer checks again at
ingest (buffers/validate.py): a value accepted here is never refused there.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from agent_r1_async.envs.base import EnvError, Observation, StepResult
from agent_r1_async.wire.messages import MAX_ABS_REWARD, MAX_COUNT, MAX_METRICS

_SHOW_CHARS = 60
_PLAIN_TYPES = (bool, int, float, type(None))
REAL = "a finite real number"


class EnvContractError(EnvError):
    """A value an env returned breaks the contract above.

    `method` is who returned it ("env.step", "MyDomain.score"), `field` the value's place in
    the result ("StepResult.reward"; "" for the result itself), `kind` "TypeError" (a wrong
    type) or "ValueError" (a right type, a bad value): the key of `env/errors/<kind>`.
    """

    def __init__(self, method: str, field: str, value: Any, expected: str,
                 kind: str = "TypeError", message: str = "") -> None:
        self.method, self.field, self.value, self.kind = method, field, value, kind
        if not message and field:
            message = f"{method}: {field} is {show(value)}, expected {expected}"
        elif not message:
            message = f"{method} returned {show(value)}, not {expected}"
        super().__init__(message)


def show(value: Any) -> str:
    """`value` for an error line: its repr (cut to 60 characters), with its type unless it is
    a plain bool, int, float or None. Never raises, whatever `__repr__` does."""
    try:
        text = repr(value)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    if len(text) > _SHOW_CHARS:
        text = text[:_SHOW_CHARS - 3] + "..."
    return text if type(value) in _PLAIN_TYPES else f"{text} ({type(value).__name__})"


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool | np.bool_)


def real(value: Any, method: str, field: str, bound: float = MAX_ABS_REWARD) -> float:
    """`value` as a float: a finite real number within ±`bound` (bool and int accepted, a
    string refused even when numeric)."""
    if not (isinstance(value, numbers.Real) or _is_bool(value)):
        why = f"{REAL} (a numeric string is not one)" if isinstance(value, str) else REAL
        raise EnvContractError(method, field, value, why)
    x = float(value)
    if not math.isfinite(x):
        raise EnvContractError(method, field, value, REAL, "ValueError")
    if abs(x) > bound:
        raise EnvContractError(method, field, value, f"a number within ±{bound:g}", "ValueError")
    return x


def flag(value: Any, method: str, field: str) -> bool:
    """`value` as a bool (True / False, numpy's too; 0, 1 and "yes" are not bools)."""
    if not _is_bool(value):
        raise EnvContractError(method, field, value, "a bool")
    return bool(value)


def count(value: Any, method: str, field: str) -> int:
    """`value` as a non-negative int (at most `MAX_COUNT`)."""
    if not isinstance(value, numbers.Integral) or _is_bool(value):
        raise EnvContractError(method, field, value, "an int")
    n = int(value)
    if not 0 <= n <= MAX_COUNT:
        raise EnvContractError(method, field, value, f"an int in [0, {MAX_COUNT}]", "ValueError")
    return n


def metrics(value: Any, method: str, field: str = "StepResult.metrics") -> dict[str, float]:
    """`value` as a dict of metric name -> float (finite, within ±`MAX_COUNT`)."""
    if not isinstance(value, Mapping):
        raise EnvContractError(method, field, value, "a dict of str -> number")
    if len(value) > MAX_METRICS:
        raise EnvContractError(method, field, value, f"at most {MAX_METRICS} names", "ValueError")
    out: dict[str, float] = {}
    for name, x in value.items():
        if not isinstance(name, str) or not name:
            raise EnvContractError(method, f"a name in {field}", name, "a non-empty str")
        out[name] = real(x, method, f"{field}[{name!r}]", float(MAX_COUNT))
    return out


def messages(value: Any, method: str, field: str, non_empty: bool) -> list[dict[str, str]]:
    """Chat messages: a list of dicts of str -> str, each with "role" and "content"."""
    if not isinstance(value, list):
        raise EnvContractError(method, field, value, "a list of message dicts")
    if non_empty and not value:
        raise EnvContractError(method, field, value,
                               "at least one message (the instruction)", "ValueError")
    for i, msg in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(msg, dict):
            raise EnvContractError(method, where, msg, 'a dict {"role": str, "content": str}')
        for key in ("role", "content"):
            if key not in msg:
                raise EnvContractError(method, where, msg, f'a dict with a "{key}" key',
                                       "ValueError")
        for key, text in msg.items():
            if not isinstance(key, str) or not isinstance(text, str):
                raise EnvContractError(method, f"{where}[{key!r}]", text, "a str")
    return value


def tools(value: Any, method: str, field: str = "Observation.tools") -> list[dict[str, Any]]:
    """Tool schemas: JSON-serializable dicts, each naming its function."""
    if not isinstance(value, list):
        raise EnvContractError(method, field, value, "a list of tool schema dicts")
    for i, tool in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(tool, dict):
            raise EnvContractError(method, where, tool, "a tool schema dict")
        function = tool.get("function", tool)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise EnvContractError(
                method, where, tool,
                '{"type": "function", "function": {"name": str, ...}}', "ValueError")
        try:
            json.dumps(tool)
        except (TypeError, ValueError) as e:
            raise EnvContractError(method, where, tool, f"JSON-serializable values ({e})",
                                   "ValueError") from None
    return value


def check_observation(obs: Any, method: str = "env.reset", at_reset: bool = True) -> Observation:
    """What `reset` (or a step that is not done) returned, checked; tools only at reset."""
    if not isinstance(obs, Observation):
        field = "" if at_reset else "StepResult.observation"
        raise EnvContractError(method, field, obs, "Observation" if at_reset else "an Observation")
    messages(obs.messages, method, "Observation.messages", non_empty=at_reset)
    if at_reset:
        tools(obs.tools, method)
    return obs


def check_step_result(result: Any, method: str = "env.step") -> StepResult:
    """What `step` returned, checked and normalized (plain float, bool and int values); the
    outcome is read only when done, the observation only when not."""
    if not isinstance(result, StepResult):
        raise EnvContractError(method, "", result, "StepResult")
    done = flag(result.done, method, "StepResult.done")
    reward = real(result.reward, method, "StepResult.reward")
    outcome = real(result.outcome_reward, method, "StepResult.outcome_reward") if done else 0.0
    truncated = flag(result.truncated, method, "StepResult.truncated")
    calls = count(result.num_tool_calls, method, "StepResult.num_tool_calls")
    named = metrics(result.metrics, method)
    obs = result.observation
    if not done:
        obs = check_observation(obs, method, at_reset=False)
    return StepResult(observation=obs, reward=reward, done=done, outcome_reward=outcome,
                      truncated=truncated, num_tool_calls=calls, metrics=named)


def prompt_too_long(tokens: int, max_model_len: int, task_id: str) -> EnvContractError:
    """The error of a prompt that leaves no room for an action in `model.max_model_len`."""
    return EnvContractError(
        "env.reset", "prompt", tokens, "", "ValueError",
        message=f"env.reset: the prompt of task {task_id!r} is {tokens} tokens, which leaves no "
                f"room for an action in model.max_model_len={max_model_len}",
    )

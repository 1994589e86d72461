"""`python_tool`: small computation problems solved by running code in the `python` tool.

Problems are generated from a seed per split (sums of squares, prime counts, digit sums of
powers, Fibonacci numbers mod m); each answer is one integer computed here in the parent, so
scoring is exact and needs no sandbox. The tool is the sandboxed `PythonExecTool`; its result
is shown to the agent as compact text (`format_exec_result`). Import this module (or name it
as `agent_r1_async.envs.tools.python_env:PythonToolEnv`) to register the env.
"""

from __future__ import annotations

import functools
import random
import zlib
from typing import Any, Literal

import msgspec

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.toolenv import Score, Shaping, ToolCall, ToolEnv, tool_call_text
from agent_r1_async.envs.tools.python_exec import (
    PythonExecTool,
    SandboxLimits,
    format_exec_result,
)

SYSTEM_PROMPT = (
    "Solve the problem by running Python. Call the tool like this:\n"
    '<tool_call>{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}</tool_call>\n'
    "Then give the final integer like this: <answer>45</answer>"
)


class PythonToolArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    seed: int = 0
    """Base seed; each split derives its own."""
    num_train: int = 1000
    """Problems in the train split."""
    num_dev: int = 100
    """Problems in the dev split."""
    num_test: int = 100
    """Problems in the test split."""
    cpu_s: int = 2
    """CPU seconds per tool call."""
    wall_s: float = 5.0
    """Wall-clock seconds per tool call (must stay below env.tool_timeout_s)."""
    memory_mb: int = 512
    """Address space of one tool call (RLIMIT_AS), in MiB."""
    sandbox: Literal["bwrap", "unsafe_inprocess"] = "bwrap"
    """`bwrap` (OS isolation; needs bubblewrap) or `unsafe_inprocess` (rlimits and a Python
    audit hook only: NOT a security boundary, accepted only when asked for here)."""
    valid_call_reward: float = 0.1
    """Process reward for the first well-formed `python` call of an episode."""
    invalid_call_penalty: float = -0.1
    """Process reward of a step with a malformed call."""


@functools.cache
def _prime_flags(limit: int = 20001) -> bytes:
    """Sieve of Eratosthenes: flags[k] == 1 iff k is prime, for k < limit."""
    flags = bytearray([1]) * limit
    flags[0:2] = b"\x00\x00"
    for d in range(2, int(limit**0.5) + 1):
        if flags[d]:
            flags[d * d :: d] = bytes(len(range(d * d, limit, d)))
    return bytes(flags)


def _fib_mod(n: int, m: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    return a


def _problem(rng: random.Random) -> tuple[str, int, str]:
    """(prompt, answer, reference code printing the answer)."""
    kind = rng.randrange(4)
    if kind == 0:
        n = rng.randint(50, 5000)
        return (f"What is the sum of the squares of the integers from 1 to {n}?",
                n * (n + 1) * (2 * n + 1) // 6, f"print(sum(i * i for i in range(1, {n + 1})))")
    if kind == 1:
        n = rng.randint(100, 20000)
        code = (f"print(sum(all(k % d for d in range(2, int(k ** 0.5) + 1)) "
                f"for k in range(2, {n})))")
        return f"How many prime numbers are smaller than {n}?", \
            sum(_prime_flags()[:n]), code
    if kind == 2:
        a, b = rng.randint(2, 9), rng.randint(20, 200)
        return (f"What is the sum of the decimal digits of {a} to the power {b}?",
                sum(map(int, str(a**b))), f"print(sum(map(int, str({a} ** {b}))))")
    n, m = rng.randint(100, 5000), rng.choice([97, 1000, 10007])
    code = f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, (a + b) % {m}\nprint(a)"
    return (f"What is the {n}-th Fibonacci number modulo {m} (F0 = 0, F1 = 1)?",
            _fib_mod(n, m), code)


def make_tasks(args: PythonToolArgs, split: str) -> list[Task]:
    sizes = {"train": args.num_train, "dev": args.num_dev, "test": args.num_test}
    if split not in sizes:
        raise ValueError(f"python_tool: unknown split {split!r} (train, dev, test)")
    held_out: set[str] = set()
    if split == "train":
        held_out = {t.prompt for s in ("dev", "test") for t in make_tasks(args, s)}
    rng = random.Random(zlib.crc32(f"{args.seed}/{split}/python_tool".encode()))
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(100 * max(sizes[split], 1)):
        if len(tasks) >= sizes[split]:
            break
        prompt, answer, code = _problem(rng)
        if prompt in held_out or prompt in seen:
            continue
        seen.add(prompt)
        tasks.append(Task(f"py-{split}-{len(tasks)}", prompt, answer, {"code": code}))
    return tasks


class PythonDomain:
    """Tools, prompt and scoring of the python_tool env (a ToolDomain)."""

    def __init__(self, tool: PythonExecTool) -> None:
        self.tools = [tool]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def score(self, task: Task, answer: str | None) -> Score:
        text = (answer or "").strip().replace(",", "")
        correct = float(text.lstrip("-").isdigit() and int(text) == task.answer)
        return Score(correct, {"success": correct})

    def format_result(self, call: ToolCall, result: Any) -> str:
        return format_exec_result(result)


@register_env("python_tool")
class PythonToolEnv:
    """Computation problems solved with a sandboxed Python tool."""

    Args = PythonToolArgs

    def __init__(self, args: PythonToolArgs, env_cfg: EnvConfig) -> None:
        if env_cfg.tool_timeout_s <= args.wall_s:
            raise ConfigError(
                f"env.args.wall_s ({args.wall_s}) must be below env.tool_timeout_s "
                f"({env_cfg.tool_timeout_s}) so the sandbox reports its own timeout"
            )
        try:
            limits = SandboxLimits(cpu_s=args.cpu_s, wall_s=args.wall_s,
                                   memory_mb=args.memory_mb)
        except ValueError as e:
            raise ConfigError(f"env.args: {e}") from None
        try:
            tool = PythonExecTool(limits, sandbox=args.sandbox)
        except RuntimeError as e:  # bwrap missing or not working: the message says what to do
            raise ConfigError(f"env.args.sandbox: {e}") from None
        self.args, self.env_cfg = args, env_cfg
        self.domain = PythonDomain(tool)
        self.shaping = Shaping(valid_call=args.valid_call_reward,
                               invalid_call=args.invalid_call_penalty)

    def make(self) -> ToolEnv:
        cfg = self.env_cfg
        return ToolEnv(self.domain, max_turns=cfg.max_turns, tool_timeout_s=cfg.tool_timeout_s,
                       shaping=self.shaping)

    def tasks(self, split: str) -> list[Task]:
        return make_tasks(self.args, split)

    def oracle(self, task: Task) -> list[str]:
        call = ToolCall("python", {"code": task.meta["code"]})
        return [tool_call_text(call), f"<answer>{task.answer}</answer>"]

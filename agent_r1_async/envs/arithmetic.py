"""`arithmetic`: multi-digit arithmetic word problems with a `calculator` tool.

Designed so a 135M model can learn it: a short system prompt with one worked example, short
problems, answer format `<answer>NUMBER</answer>`, and two difficulty knobs (`digits`,
`num_ops`). Rewards: outcome 1.0 for the exact number; process rewards for the first
well-formed calculator call of an episode (`valid_call_reward`) and for a calculator result
that equals the gold answer (`correct_result_reward`, once per episode).

The calculator parses with `ast` and evaluates only numbers and + - * / ( ) with exact
fractions: no names, calls, attributes or powers, so no code runs and no result can blow up.
Tasks are generated from a seed per split (dev/test prompts are excluded from train).
"""

from __future__ import annotations

import ast
import random
import zlib
from fractions import Fraction
from typing import Any, ClassVar

import msgspec

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.toolenv import (
    CallOutcome,
    EpisodeState,
    Score,
    Shaping,
    ToolCall,
    ToolEnv,
    tool_call_text,
)

MAX_EXPR_CHARS = 200
MAX_ABS = Fraction(10) ** 30
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class CalcError(ValueError):
    """An expression the calculator refuses; the message is shown to the agent."""


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise CalcError("division by zero")
            v = a / b
        else:
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            v = ops[type(node.op)]
        if abs(v) > MAX_ABS:
            raise CalcError("number too large")
        return v
    raise CalcError(f"only numbers and + - * / ( ) are allowed, not {type(node).__name__}")


def format_number(v: Fraction) -> str:
    """Integers exactly; other values rounded to 6 decimals without trailing zeros."""
    if v.denominator == 1:
        return str(v.numerator)
    return f"{float(v):.6f}".rstrip("0").rstrip(".")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression safely; raises CalcError on anything else."""
    expr = expression.replace(",", "").replace("x", "*").replace("×", "*").replace("÷", "/")
    if len(expr) > MAX_EXPR_CHARS:
        raise CalcError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise CalcError(f"cannot parse {expression!r}") from None
    return format_number(_eval(tree.body))


class Calculator:
    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / and parentheses."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. 12*(3+4)"}},
        "required": ["expression"],
        "additionalProperties": False,
    }

    async def call(self, expression: str) -> str:
        try:
            return calculate(expression)
        except CalcError as e:  # a bad expression is an answer, not a tool failure
            return f"Error: {e}"


SYSTEM_PROMPT = (
    "Solve the problem. Use the calculator like this:\n"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12*(3+4)"}}</tool_call>\n'
    "Then give the final number like this: <answer>84</answer>"
)

# --------------------------------------------------------------------------------------
# Task generation
# --------------------------------------------------------------------------------------

_NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim", "Leo", "Mia"]
_ITEMS = ["apples", "coins", "books", "stamps", "shells", "cards", "pens", "marbles"]


class ArithmeticArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    digits: int = 3
    """Digits of each number in a problem (multipliers use at most 2)."""
    num_ops: int = 1
    """Operations per problem (1 = one step; more need several calculator calls or one long one)."""
    seed: int = 0
    """Base seed; each split derives its own."""
    num_train: int = 2000
    """Problems in the train split."""
    num_dev: int = 200
    """Problems in the dev split."""
    num_test: int = 200
    """Problems in the test split."""
    valid_call_reward: float = 0.1
    """Process reward for the first well-formed calculator call of an episode."""
    invalid_call_penalty: float = -0.1
    """Process reward of a step with a malformed call."""
    correct_result_reward: float = 0.2
    """Process reward (once) when a calculator result equals the gold answer."""

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 9:
            raise ValueError("digits: must be in 1..9")
        if not 1 <= self.num_ops <= 4:
            raise ValueError("num_ops: must be in 1..4")


def _problem(rng: random.Random, digits: int, num_ops: int) -> tuple[str, int, str]:
    """(prompt, answer, expression) for one problem; the running total never goes negative."""
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    total = rng.randint(max(lo, 2), hi)
    parts, expr = [f"{name} has {total} {item}."], str(total)
    for _ in range(num_ops):
        op = rng.choice("+-*")
        if op == "*":
            k = rng.randint(2, min(hi, 99))
            parts.append(f"Then the number of {item} is multiplied by {k}.")
            expr = f"({expr})*{k}" if any(c in expr for c in "+-") else f"{expr}*{k}"
            total *= k
        elif op == "-" and total > 1:
            k = rng.randint(1, min(hi, total - 1))
            parts.append(f"{name} gives away {k}.")
            total, expr = total - k, f"{expr}-{k}"
        else:
            k = rng.randint(lo, hi)
            parts.append(f"{name} gets {k} more.")
            total, expr = total + k, f"{expr}+{k}"
    parts.append(f"How many {item} does {name} have now?")
    return " ".join(parts), total, expr


def make_tasks(args: ArithmeticArgs, split: str) -> list[Task]:
    sizes = {"train": args.num_train, "dev": args.num_dev, "test": args.num_test}
    if split not in sizes:
        raise ValueError(f"arithmetic: unknown split {split!r} (train, dev, test)")
    held_out: set[str] = set()
    if split == "train":  # keep dev/test problems out of train
        held_out = {t.prompt for s in ("dev", "test") for t in make_tasks(args, s)}
    rng = random.Random(zlib.crc32(f"{args.seed}/{split}/{args.digits}/{args.num_ops}".encode()))
    tasks: list[Task] = []
    while len(tasks) < sizes[split]:
        prompt, answer, expr = _problem(rng, args.digits, args.num_ops)
        if prompt in held_out:
            continue
        meta = {"expression": expr, "digits": args.digits, "num_ops": args.num_ops}
        tasks.append(Task(f"arith-{split}-{len(tasks)}", prompt, answer, meta))
    return tasks


def answer_value(text: str) -> Fraction | None:
    """The number an answer states ("1,234" and "1234.0" read as 1234); None if not a number."""
    t = text.strip().replace(",", "").rstrip(".")
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


class ArithmeticDomain:
    """Tools, prompt and scoring of the arithmetic env (a ToolDomain)."""

    def __init__(self, args: ArithmeticArgs) -> None:
        self.args = args
        self.tools = [Calculator()]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def score(self, task: Task, answer: str | None) -> Score:
        value = None if answer is None else answer_value(answer)
        correct = float(value is not None and value == task.answer)
        return Score(correct, {"success": correct})

    def process_reward(self, state: EpisodeState, outcome: CallOutcome) -> float:
        if state.scratch.get("paid_correct") or not isinstance(outcome.result, str):
            return 0.0
        value = answer_value(outcome.result)
        if value is not None and value == state.task.answer:
            state.scratch["paid_correct"] = True
            return self.args.correct_result_reward
        return 0.0


@register_env("arithmetic")
class ArithmeticEnv:
    """Arithmetic word problems with a calculator tool (difficulty: digits, num_ops)."""

    Args = ArithmeticArgs

    def __init__(self, args: ArithmeticArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg = args, env_cfg
        self.domain = ArithmeticDomain(args)
        self.shaping = Shaping(
            valid_call=args.valid_call_reward, invalid_call=args.invalid_call_penalty
        )

    def make(self) -> ToolEnv:
        cfg = self.env_cfg
        return ToolEnv(
            self.domain, max_turns=cfg.max_turns, tool_timeout_s=cfg.tool_timeout_s,
            shaping=self.shaping,
        )

    def tasks(self, split: str) -> list[Task]:
        return make_tasks(self.args, split)

    def oracle(self, task: Task) -> list[str]:
        call = ToolCall("calculator", {"expression": task.meta["expression"]})
        return [tool_call_text(call), f"<answer>{task.answer}</answer>"]


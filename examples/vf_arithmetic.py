"""A verifiers v1 environment written only against `verifiers` (no import of this project).

`VfArithmeticTaskset` yields arithmetic word problems (one operation on 2- and 3-digit
numbers); `VfArithmeticTask` rewards the number in the final `<answer>...</answer>` (1.0 when
right) and records `format_ok` and `tool_calls`. `VfArithmeticHarness`, the taskset's bundled
harness, is an ordinary OpenAI tool-calling loop with a calculator, run in-process (no
program to install, so it runs offline): every model call goes through the rollout's
interception endpoint, as verifiers requires, and from there to whatever client the run
names (for agent-r1-async, the actor's chat endpoint).

It runs in the verifiers environment that `scripts/setup.sh` creates (`.venv-verifiers/`),
found by module name (`env.args.pythonpath` puts `examples/` on its path):

    agent-r1-async launch --config configs/verifiers_example.yaml
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI

SYSTEM = ("Solve the problem with the calculator tool. Call it like this:\n"
          '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>\n'
          "Then give the final number like this: <answer>84</answer>")
TOOLS = [{"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object",
                   "properties": {"expression": {"type": "string", "description": "e.g. 12*7"}},
                   "required": ["expression"]}}}]
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv}
_STORIES = {
    "+": "A library has {a} books and receives {b} more. How many books does it have now?",
    "-": "A warehouse holds {a} boxes and ships {b} of them. How many boxes are left?",
    "*": "A crate holds {a} apples. How many apples are in {b} crates?",
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ValueError("only numbers, + - * / and parentheses")


def calculator(arguments: str) -> str:
    """The tool: the value of `expression`, or "Error: why"."""
    try:
        expression = str(json.loads(arguments).get("expression", ""))
        value = _eval(ast.parse(expression, mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, json.JSONDecodeError,
            AttributeError) as e:
        return f"Error: {e}"
    return str(int(value)) if value == int(value) else f"{value:.4g}"


def final_number(text: str) -> int | None:
    match = _ANSWER.search(text or "")
    if match is None:
        return None
    digits = match.group(1).strip().replace(",", "")
    return int(digits) if re.fullmatch(r"-?\d+", digits) else None


class VfArithmeticData(vf.TaskData):
    answer: int = 0
    expression: str = ""
    """What the calculator should be asked (for demonstrations; the model never sees it)."""


class VfArithmeticTask(vf.Task[VfArithmeticData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if final_number(trace.last_reply) == self.data.answer else 0.0

    @vf.metric
    async def format_ok(self, trace: vf.Trace) -> float:
        return 0.0 if final_number(trace.last_reply) is None else 1.0

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class VfArithmeticConfig(vf.TasksetConfig):
    num_tasks: int = 1200
    """Problems, in a fixed order: the launch's splits are index ranges of it."""
    seed: int = 7


class VfArithmeticTaskset(vf.Taskset[VfArithmeticTask, VfArithmeticConfig]):
    def load(self) -> list[VfArithmeticTask]:
        rng = random.Random(self.config.seed)
        tasks = []
        for i in range(self.config.num_tasks):
            op = rng.choice("+-*")
            if op == "*":
                a, b = rng.randint(11, 99), rng.randint(3, 9)
            else:
                a, b = sorted((rng.randint(100, 999), rng.randint(10, 999)), reverse=True)
            answer = {"+": a + b, "-": a - b, "*": a * b}[op]
            data = VfArithmeticData(id=f"arith-{i}", prompt=_STORIES[op].format(a=a, b=b),
                                    system_prompt=SYSTEM, answer=answer,
                                    expression=f"{a}{op}{b}")
            tasks.append(VfArithmeticTask(data, self.config.task))
        return tasks


class VfArithmeticHarnessConfig(vf.HarnessConfig):
    max_turns: int = 3
    """Model calls per episode: a call, the calculator's result, a final answer."""


class VfArithmeticHarness(vf.Harness[VfArithmeticHarnessConfig]):
    """Ask, run the calculator for every tool call, ask again; in-process."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime,
                     endpoint: str, secret: str, mcp_urls: dict[str, str],
                     data: vf.TaskData, tool_interception_url: str | None = None,
                     ) -> vf.ProgramResult:
        system, prompt = self.resolve_text_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system or SYSTEM},
                                          {"role": "user", "content": prompt or ""}]
        # One timeout for every phase, connecting included: on a busy machine the
        # interception proxy can take seconds to accept (the client's default connect is 5 s).
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                               timeout=600.0) as client:
            for _ in range(self.config.max_turns):
                reply = (await client.chat.completions.create(
                    model=ctx.model, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                )).choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": calculator(call.function.arguments)})
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def demonstrations(num: int, seed: int = 7) -> list[dict[str, Any]]:
    """The first `num` tasks solved as the harness would: a calculator call, its result, the
    answer; chat transcripts for a warm start (`sft.demos_source: jsonl`)."""
    taskset = VfArithmeticTaskset(VfArithmeticConfig(num_tasks=num, seed=seed))
    out = []
    for task in taskset.load():
        d = task.data
        call = {"id": "call_0", "type": "function", "function": {
            "name": "calculator", "arguments": json.dumps({"expression": d.expression})}}
        out.append({"tools": TOOLS, "messages": [
            {"role": "system", "content": d.system_prompt}, {"role": "user", "content": d.prompt},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": calculator(
                call["function"]["arguments"])},
            {"role": "assistant", "content": f"<answer>{d.answer}</answer>"}]})
    return out


__all__ = ["VfArithmeticHarness", "VfArithmeticTaskset"]

if __name__ == "__main__":  # python examples/vf_arithmetic.py N > demos.jsonl
    import sys

    for transcript in demonstrations(int(sys.argv[1])):
        sys.stdout.write(json.dumps(transcript) + "\n")

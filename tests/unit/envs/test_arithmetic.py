"""Arithmetic env: safe calculator, deterministic tasks, rewards, oracle episodes."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.arithmetic import CalcError, answer_value, calculate
from agent_r1_async.envs.registry import get_env_spec


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("12*(3+4)", "84"),
        ("1,234 + 766", "2000"),
        ("7/2", "3.5"),
        ("1/3", "0.333333"),
        ("-(2-5)*3", "9"),
        ("6 / 3", "2"),
        ("0.1+0.2", "0.3"),  # exact fractions: no 0.30000000000000004
        ("3 x 4", "12"),
    ],
)
def test_calculator_values(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("__import__('os').system('echo hi')", "only numbers"),
        ("2**10", "only numbers"),
        ("a+1", "only numbers"),
        ("1/0", "division by zero"),
        ("(1+", "cannot parse"),
        ("9" * 20 + "*" + "9" * 20, "too large"),
        ("1+" * 150 + "1", "longer than 200"),
        ("True+1", "only numbers"),
    ],
)
def test_calculator_refuses(expr, fragment):
    with pytest.raises(CalcError, match=fragment):
        calculate(expr)


def test_answer_value():
    assert answer_value(" 1,234 ") == 1234 and answer_value("1234.0") == 1234
    assert answer_value("12.") == 12 and answer_value("twelve") is None


def spec_for(**args):
    return get_env_spec(EnvConfig(name="arithmetic", max_turns=3, args=args))


def test_tasks_are_deterministic_disjoint_and_correct():
    spec = spec_for(num_train=300, num_dev=50, num_test=50, num_ops=2)
    dev = spec.tasks("dev")
    assert dev == spec_for(num_train=300, num_dev=50, num_test=50, num_ops=2).tasks("dev")
    assert dev != spec_for(num_dev=50, num_ops=2, seed=1).tasks("dev")
    train = spec.tasks("train")
    assert len(train) == 300 and len(dev) == 50
    assert not {t.prompt for t in train} & {t.prompt for t in dev + spec.tasks("test")}
    for t in dev:
        assert calculate(t.meta["expression"]) == str(t.answer) and t.answer >= 0
    with pytest.raises(ValueError, match="unknown split 'val'"):
        spec.tasks("val")


def test_difficulty_knob_digits():
    (t,) = spec_for(digits=5, num_dev=1, num_ops=1).tasks("dev")
    first = int(t.prompt.split(" has ")[1].split()[0])
    assert 10_000 <= first <= 99_999


def run_episode(spec, task, actions):
    async def go():
        env = spec.make()
        await env.reset(task)
        return [await env.step(a) for a in actions]

    return asyncio.run(go())


def test_oracle_episode_rewards():
    spec = spec_for(num_dev=3)
    task = spec.tasks("dev")[0]
    r1, r2 = run_episode(spec, task, spec.oracle(task))
    # well-formed call 0.1 + calculator result equal to the gold answer 0.2
    assert r1.reward == pytest.approx(0.3)
    assert (
        r1.observation.messages[0]["content"] == f"<tool_response>\n{task.answer}\n</tool_response>"
    )
    assert r2.done and r2.outcome_reward == 1.0 and r2.metrics["success"] == 1.0


def test_wrong_and_malformed():
    spec = spec_for(num_dev=1)
    task = spec.tasks("dev")[0]
    bad = '<tool_call>{"name": "calculator", "arguments": {"expr": "1+1"}}</tool_call>'
    r1, r2, r3 = run_episode(
        spec,
        task,
        [
            bad,
            '<tool_call>{"name": "calculator", "arguments": {"expression": "2**3"}}</tool_call>',
            "<answer>-1</answer>",
        ],
    )
    assert (
        r1.reward == pytest.approx(-0.1)
        and "required property" in r1.observation.messages[0]["content"]
    )
    # a refused expression is a normal tool answer: the call was well-formed
    assert (
        r2.reward == pytest.approx(0.1)
        and "Error: only numbers" in r2.observation.messages[0]["content"]
    )
    assert r3.done and r3.outcome_reward == 0.0

"""The world env through its tool calls: oracle episodes, rewards, penalties, metrics."""

from __future__ import annotations

import asyncio
import math

import pytest

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import StepResult, Task
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.toolenv import ToolCall, tool_call_text
from agent_r1_async.envs.world.env import horizon_bucket
from agent_r1_async.envs.world.layout import DIRECTIONS
from agent_r1_async.envs.world.planner import distance
from agent_r1_async.envs.world.state import act, initial_state


def _spec(max_turns: int = 400, **args):
    # The planner demonstrates: its plans are optimal, which the reward checks below count on.
    sizes = {"num_train": 6, "num_dev": 3, "num_test": 3, "demonstrator": "planner"}
    return get_env_spec(EnvConfig(name="world", max_turns=max_turns, args={**sizes, **args}))


def _play(spec, task: Task, actions: list[str]) -> list[StepResult]:
    async def run() -> list[StepResult]:
        env = spec.make()
        await env.reset(task)
        out = []
        for action in actions:
            out.append(await env.step(action))
            if out[-1].done:
                break
        return out

    return asyncio.run(run())


def _call(tool: str, **arguments) -> str:
    return tool_call_text(ToolCall(tool, arguments))


@pytest.mark.parametrize("horizon", ["short", "medium", "long", "xlong"])
def test_the_oracle_solves_every_task_and_its_rewards_sum_to_one(horizon):
    spec = _spec(horizon=horizon)
    for task in spec.tasks("dev"):
        actions = spec.oracle(task)
        results = _play(spec, task, actions)
        assert len(results) == len(actions) and results[-1].done  # ends on the last action
        end = results[-1]
        assert end.outcome_reward == 1.0 and not end.truncated
        assert math.fsum(r.reward for r in results) == pytest.approx(1.0, abs=1e-12)
        n = len(actions)
        assert all(r.reward == pytest.approx(1 / n, abs=1e-15) for r in results)
        assert end.metrics["success"] == 1.0 and end.metrics["optimal_len"] == n
        assert end.metrics["steps"] == n and end.metrics["progress"] == 1.0
        assert end.metrics["horizon_bucket"] == horizon_bucket(n)
        assert end.metrics["invalid_actions"] == 0.0 and end.metrics["format_ok"] == 1.0


def test_horizon_bucket_is_the_power_of_two_at_or_above():
    assert [horizon_bucket(n) for n in (1, 2, 3, 6, 8, 9, 20, 64, 100)] == [
        1, 2, 4, 8, 8, 16, 32, 64, 128]


def _detour(spec, task: Task) -> tuple[str, str]:
    """A move that lengthens the optimal plan by one, and the move back."""
    layout = task.meta["layout"]
    start = initial_state(layout)
    d0 = distance(layout, start)
    for way, nxt in layout.exits[0].items():
        state = start.copy()
        if act(layout, state, ("go", way)).valid and distance(layout, state) == d0 + 1:
            back = layout.way(nxt, 0)
            return _call("go", direction=way), _call("go", direction=back)
    raise AssertionError("no detour from the start room")


def test_a_detour_is_paid_back_exactly_and_costs_progress_within_the_budget():
    spec = _spec(horizon="medium")
    task = spec.tasks("dev")[0]
    oracle = spec.oracle(task)
    n = len(oracle)
    away, back = _detour(spec, task)
    results = _play(spec, task, [away, back, *oracle])
    assert results[0].reward == -1 / n and results[1].reward == 1 / n
    assert results[-1].done and results[-1].outcome_reward == 1.0
    assert math.fsum(r.reward for r in results) == pytest.approx(1.0, abs=1e-12)
    # With only n turns the detour leaves 2 actions undone: process (n - 2) / n, no success.
    short = _spec(max_turns=n, horizon="medium")
    cut = _play(short, task, [away, back, *oracle])
    assert len(cut) == n and cut[-1].done and cut[-1].truncated
    assert cut[-1].outcome_reward == 0.0 and cut[-1].metrics["success"] == 0.0
    assert math.fsum(r.reward for r in cut) == pytest.approx((n - 2) / n, abs=1e-12)
    assert cut[-1].metrics["progress"] == pytest.approx((n - 2) / n, abs=1e-12)
    assert cut[-1].metrics["steps"] == n
    # Every step before the end carries the metrics so far, so an episode cut short by its
    # context (no score from the env) keeps them: -1 / n after the detour, 0 back, then k / n
    # after k oracle actions.
    assert results[0].metrics["progress"] == pytest.approx(-1 / n, abs=1e-12)
    for k, r in enumerate(results[1:-1]):
        assert r.metrics["progress"] == pytest.approx(k / n, abs=1e-12)
        assert r.metrics["optimal_len"] == n and r.metrics["success"] == 0.0


def test_invalid_actions_and_malformed_calls_earn_the_penalty_and_change_nothing():
    spec = _spec(horizon="medium", invalid_action_penalty=-0.01)
    task = next(t for t in spec.tasks("train") if len(t.meta["layout"].exits[0]) < 4)
    wall = next(w for w in DIRECTIONS if w not in task.meta["layout"].exits[0])
    oracle = spec.oracle(task)
    actions = [
        _call("go", direction=wall),            # no exit: refused by the world
        _call("take", item="unicorn"),          # not here
        _call("drop", item="cup"),              # not carried
        _call("go", direction="up"),            # not a direction: schema error
        '<tool_call>{"name": "go", "arguments": </tool_call>',  # not JSON
        _call("look"), _call("inventory"),      # valid, change nothing: 0
    ]
    results = _play(spec, task, [*actions, *oracle])
    assert [r.reward for r in results[:7]] == [-0.01] * 5 + [0.0, 0.0]
    assert results[0].observation.messages[0]["content"] == (
        f"<tool_response>\nThere is no exit to the {wall}.\n</tool_response>")
    assert results[-1].metrics["invalid_actions"] == 3.0  # the world refused three
    assert results[-1].metrics["success"] == 1.0
    assert math.fsum(r.reward for r in results) == pytest.approx(1.0 - 0.05, abs=1e-12)


def test_one_call_per_turn_the_second_is_refused():
    spec = _spec(horizon="medium")
    task = spec.tasks("dev")[0]
    first = spec.oracle(task)[0]
    results = _play(spec, task, [first + _call("look")])
    n = len(spec.oracle(task))
    assert results[0].reward == pytest.approx(1 / n - 0.01, abs=1e-15)
    assert "at most 1 tool calls per turn" in results[0].observation.messages[0]["content"]


def test_an_action_without_a_call_ends_the_episode_unsolved():
    spec = _spec(horizon="short")
    task = spec.tasks("dev")[0]
    (end,) = _play(spec, task, ["I will look around."])
    assert end.done and end.outcome_reward == 0.0 and not end.truncated
    assert end.metrics["success"] == 0.0 and end.metrics["format_ok"] == 0.0
    assert end.metrics["steps"] == 1.0 and end.metrics["progress"] == 0.0


def test_the_prompt_names_the_goal_the_start_room_and_the_limit():
    spec = _spec(horizon="long")
    task = spec.tasks("dev")[0]
    layout = task.meta["layout"]
    start = layout.names[0]
    assert task.prompt.startswith(f"Collect the {layout.targets[0]}, ")
    assert f"drop them in the {start}. You can hold 2 objects at a time" in task.prompt
    assert task.prompt.splitlines()[1].startswith(f"{start.capitalize()}. Exits: ")


def test_a_mixed_task_ends_after_its_own_turn_limit_and_the_mix_suggests_its_longest():
    spec = _spec(max_turns=40, mix={"short": 0.5, "medium": 0.5}, num_dev=12)
    tasks = spec.tasks("dev")
    short = next(t for t in tasks if t.meta["horizon"] == "short")
    medium = next(t for t in tasks if t.meta["horizon"] == "medium")
    look = _call("look")
    results = _play(spec, short, [look] * 100)
    assert len(results) == 24 and results[-1].truncated  # short's budget, under max_turns 40
    assert results[-1].metrics["steps"] == 24.0
    results = _play(spec, medium, [look] * 100)
    assert len(results) == 40 and results[-1].truncated  # medium's 64, capped at max_turns
    from agent_r1_async.envs.world.args import WorldArgs
    from agent_r1_async.envs.world.env import WorldEnv

    assert WorldEnv.suggested_max_turns(WorldArgs(mix={"short": 0.9, "long": 0.1})) == 128
    assert WorldEnv.suggested_max_turns(WorldArgs(horizon="short")) == 24

"""One episode: score deltas as process rewards, penalties, endings, metrics, the game pool."""

from __future__ import annotations

import asyncio
import gc
import re

import pytest

from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.envs.twx import text
from agent_r1_async.envs.twx.jvm import shared_jvm
from tests.unit.envs.twx.conftest import SMALL_COIN, SMALL_COOKING, make_spec

pytestmark = pytest.mark.usefixtures("twx_ready")

UNKNOWN = "Unknown action: I'm not sure what you mean."
# Cooking, train seed 0, one room, one ingredient: the recipe is "chicken wing: grill it".
# The game scores four sub-goals (take the chicken wing, grill it, prepare the meal, eat
# it), each 1/4 of the normalized score.
GOLD = ["look around", "take cookbook", "read cookbook", "take knife", "open fridge",
        "take chicken wing", "close fridge", "cook chicken wing in toaster", "prepare meal",
        "eat meal"]
GOLD_REWARDS = [0, 0, 0, 0, 0, 0.25, 0, 0.25, 0.25, 0.25]


def _act(command: str) -> str:
    return text.action_text(command)


async def _steps(spec, task, actions):
    env = spec.make()
    await env.reset(task)
    return [await env.step(a) for a in actions]


def test_score_deltas_are_the_process_rewards_and_sum_to_the_final_score():
    spec = make_spec(SMALL_COOKING)
    task = spec.tasks("train")[0]
    assert task.meta["params"].startswith("numLocations=1,numDistractorItems=0,numIngredients=1")
    assert list(spec.definition.gold_commands(task)) == GOLD
    results = asyncio.run(_steps(spec, task, [_act(c) for c in GOLD]))
    assert [r.reward for r in results] == GOLD_REWARDS
    assert results[-1].outcome_reward == 1.0 and results[-1].metrics["score"] == 1.0


def test_an_episode_cut_at_max_turns_keeps_the_score_it_reached():
    spec = make_spec(SMALL_COOKING, max_turns=6)
    results = asyncio.run(_steps(spec, spec.tasks("train")[0], [_act(c) for c in GOLD[:6]]))
    assert [r.reward for r in results] == GOLD_REWARDS[:6]
    end = results[-1]
    assert end.done and end.truncated and end.outcome_reward == 0.0
    assert end.metrics == {"steps": 6.0, "optimal_len": 10.0, "score": 0.25, "success": 0.0,
                           "tool_calls": 6.0, "invalid_commands": 0.0, "invalid_calls": 0.0,
                           "lost": 0.0, "truncated": 1.0}


def test_a_ruined_meal_ends_the_episode_lost():
    spec = make_spec(SMALL_COOKING)
    # the recipe says grill; roasting in the oven ruins it
    results = asyncio.run(_steps(spec, spec.tasks("train")[0], [
        _act("open fridge"), _act("take chicken wing"), _act("cook chicken wing in oven")]))
    assert [r.reward for r in results] == [0.0, 0.25, 0.0]
    end = results[-1]
    assert end.done and not end.truncated and end.outcome_reward == 0.0
    assert (end.metrics["lost"], end.metrics["success"], end.metrics["score"]) == (1.0, 0.0, 0.25)


def test_a_command_the_game_does_not_understand_costs_the_penalty():
    spec = make_spec(SMALL_COOKING)
    results = asyncio.run(_steps(spec, spec.tasks("train")[0], [
        _act("dance wildly"), _act("take chicken wing"), _act("open fridge")]))
    assert [r.reward for r in results] == [-0.05, -0.05, 0.0]  # the wing is in the closed fridge
    assert results[0].observation.messages == [
        {"role": "user", "content": f"<tool_response>\n{UNKNOWN}\n</tool_response>"}]
    m = results[-1].metrics
    assert (m["invalid_commands"], m["tool_calls"], m["invalid_calls"], m["steps"]) == (2, 3, 0, 3)


def test_an_action_without_one_well_formed_call_costs_the_call_penalty():
    spec = make_spec(SMALL_COOKING)
    two = _act("take cookbook") + _act("take knife")
    wrong_tool = '<tool_call>{"name": "go", "arguments": {"command": "north"}}</tool_call>'
    results = asyncio.run(_steps(spec, spec.tasks("train")[0], [
        "I should look for the cookbook.", wrong_tool, two, _act("inventory")]))
    assert [r.reward for r in results] == [-0.1, -0.1, -0.1, 0.0]
    said = [r.observation.messages[0]["content"] for r in results]
    assert said[0] == ("<tool_response>\nError: no command. Send one like "
                       f"{_act('look around')}\n</tool_response>")
    assert said[1] == ("<tool_response>\nError: unknown tool 'go'; the only tool is act.\n"
                       "</tool_response>")
    assert said[2] == ("<tool_response>\nYou take the cookbook.\nError: one command per turn; "
                       "the 1 after the first did not run.\n</tool_response>")
    assert "cookbook" in said[3] and "knife" not in said[3]  # only the first call ran
    m = results[-1].metrics
    assert (m["invalid_calls"], m["tool_calls"], m["invalid_commands"]) == (3, 2, 0)
    assert [r.num_tool_calls for r in results] == [0, 1, 2, 1]


def test_the_opening_messages_and_the_valid_commands_option():
    spec = make_spec({**SMALL_COIN, "show_valid_actions": True})
    task = spec.tasks("train")[5]
    env = spec.make()
    obs = asyncio.run(env.reset(task))
    system, user = obs.messages
    assert system["role"] == "system" and _act("look around") in system["content"]
    assert "take coin" in system["content"]
    assert obs.tools == [text.TOOL_SCHEMA]
    assert user["content"].startswith("Your task is to search the environment and find the "
                                      "coin.  Once you find the coin, take it.\n\nYou are in ")
    room, valid = user["content"].split("\n\nValid commands: ")
    # what the description offers: an exit "To the <Direction> you see ..." is a move, the
    # coin (when in view) can be taken; inventory and look around always work
    moves = [f"move {d.lower()}" for d in re.findall(r"To the (\w+) you see", room)]
    coin = ["take coin"] if "a coin" in room else []
    assert valid.split(", ") == sorted(["inventory", "look around", *moves, *coin])


def test_step_before_reset_is_an_env_error():
    env = make_spec(SMALL_COIN).make()
    with pytest.raises(EnvError, match="before reset"):
        asyncio.run(env.step(_act("look around")))


def test_games_in_play_are_bounded_and_given_back():
    spec = make_spec({**SMALL_COIN, "max_games": 1})
    pool = spec.definition.pool
    tasks = spec.tasks("train")
    first, second = spec.make(), spec.make()
    asyncio.run(first.reset(tasks[0]))
    assert pool.leased == 1
    with pytest.raises(EnvError, match=r"1 games are in play in this process "
                                       r"\(env\.args\.max_games\)"):
        asyncio.run(second.reset(tasks[1]))
    assert pool.leased == 1
    for action in spec.oracle(tasks[0]):  # a finished episode gives its game back
        result = asyncio.run(first.step(action))
    assert result.done and pool.leased == 0
    asyncio.run(second.reset(tasks[1]))
    del second  # an episode dropped mid-game (a timeout, a stop) gives it back too
    gc.collect()
    assert pool.leased == 0


def test_episodes_on_worker_threads_share_one_jvm():
    """As the actor runs them: every env call on its own thread and event loop."""
    spec = make_spec(SMALL_COOKING)
    tasks = spec.tasks("dev")[:8]
    jvm = shared_jvm(256)

    async def episode(task):
        env = spec.make()
        await run_offloaded(lambda: env.reset(task), 30, "reset")
        for action in spec.oracle(task):
            result = await run_offloaded(lambda a=action: env.step(a), 30, "step")
        return result

    async def all_episodes():
        return await asyncio.gather(*(episode(t) for t in tasks))

    results = asyncio.run(all_episodes())
    assert [r.outcome_reward for r in results] == [1.0] * 8
    assert shared_jvm(256) is jvm and jvm.alive()
    assert spec.definition.pool.leased == 0

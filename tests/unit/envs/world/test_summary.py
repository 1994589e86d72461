"""The world's oracle summary (`state_summary`): what the agent has seen, in words."""

from __future__ import annotations

import asyncio

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.world.env import state_summary
from agent_r1_async.envs.world.layout import Layout
from agent_r1_async.envs.world.state import act, initial_state

# hall (start) -north- kitchen -east, red door- cellar; the ball in the cellar and the cup at
# home are the goals; the red key and a lamp lie in the kitchen.
HOUSE = Layout(names=("hall", "kitchen", "cellar"), cells=((0, 0), (0, 1), (1, 1)),
               parent=(-1, 0, 1), locks={2: "red"},
               items={"red key": 1, "ball": 2, "cup": 0, "lamp": 1}, targets=("ball", "cup"),
               inventory_limit=0)


def test_the_summary_states_place_way_back_inventory_doors_goals_and_what_was_seen():
    state, visited = initial_state(HOUSE), {0}

    def after(*actions: tuple[str, str]) -> str:
        for a in actions:
            assert act(HOUSE, state, a).valid
            visited.add(state.room)
        return state_summary(HOUSE, state, visited)

    # Nothing seen beyond the hall: the ball's room and the red door are not mentioned.
    assert after() == ("I am in the hall. I carry nothing. Already in the hall: the cup. "
                       "Still to drop in the hall: the ball.")
    assert after(("go", "north")) == (
        "I am in the kitchen; the way back to the hall: south. I carry nothing. Already in the "
        "hall: the cup. Still to drop in the hall: the ball. Seen: the red key in the kitchen. "
        "Locked: the red door east of the kitchen.")
    assert after(("take", "red key"), ("unlock", "east"), ("go", "east")) == (
        "I am in the cellar; the way back to the hall: west, south. I carry nothing. I unlocked "
        "the red door. Already in the hall: the cup. Still to drop in the hall: the ball. "
        "Seen: the ball in the cellar.")
    assert after(("take", "ball"), ("go", "west"), ("go", "south"), ("drop", "ball")) == (
        "I am in the hall. I carry nothing. I unlocked the red door. Already in the hall: the "
        "ball and the cup. Every goal object is home.")


def test_the_env_offers_it_and_it_follows_the_episode():
    spec = get_env_spec(EnvConfig(name="world", max_turns=64, args={
        "num_train": 2, "num_dev": 2, "num_test": 2, "horizon": "medium"}))
    task = spec.tasks("dev")[0]

    async def play() -> list[str]:
        env = spec.make()
        await env.reset(task)
        out = [env.state_summary()]
        for action in spec.oracle(task):
            await env.step(action)
            out.append(env.state_summary())
        return out

    summaries = asyncio.run(play())
    home = task.meta["layout"].names[0]
    assert summaries[0].startswith(f"I am in the {home}. I carry nothing.")
    assert summaries[-1].endswith("Every goal object is home.")
    assert all(len(s) < 600 for s in summaries)  # a few sentences, whatever the world

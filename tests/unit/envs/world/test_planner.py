"""The oracle: hand-counted plans on hand-built worlds, and on generated small worlds the
exact optimum of a brute-force search over every action, from every reachable state."""

from __future__ import annotations

import random

import pytest

from agent_r1_async.envs.world import planner
from agent_r1_async.envs.world.args import HORIZONS, Knobs
from agent_r1_async.envs.world.layout import Layout, generate
from agent_r1_async.envs.world.planner import distance, plan
from agent_r1_async.envs.world.state import CARRIED, WorldState, act, initial_state, solved
from tests.unit.envs.world.bruteforce import exact_distances

# start(0) at (0, 0); room 1 east of it, room 2 west of it, room 3 east of room 1.
CELLS = ((0, 0), (1, 0), (-1, 0), (2, 0))
PARENT = (-1, 0, 0, 1)


def _layout(items: dict[str, int], targets: tuple[str, ...], locks=None, limit=0) -> Layout:
    return Layout(("hall", "kitchen", "pantry", "study"), CELLS, PARENT, locks or {}, items,
                  targets, limit)


def _replay(layout: Layout, state: WorldState) -> int:
    actions = plan(layout, state)
    assert actions is not None
    for action in actions:
        assert act(layout, state, action).valid, action
    assert solved(layout, state)
    return len(actions)


def test_fetch_down_a_corridor_by_hand():
    # go east, go east, take, go west, go west, drop: 6.
    layout = _layout({"cup": 3}, ("cup",))
    assert plan(layout, initial_state(layout)) == [
        ("go", "east"), ("go", "east"), ("take", "cup"), ("go", "west"), ("go", "west"),
        ("drop", "cup")]


def test_a_key_on_the_other_side_by_hand():
    # The red door is between the hall and the kitchen, its key in the pantry (west):
    # go west, take key, go east, unlock east, go east, take cup, go west, drop = 8.
    layout = _layout({"red key": 2, "cup": 1}, ("cup",), locks={1: "red"})
    assert plan(layout, initial_state(layout)) == [
        ("go", "west"), ("take", "red key"), ("go", "east"), ("unlock", "east"),
        ("go", "east"), ("take", "cup"), ("go", "west"), ("drop", "cup")]


def test_the_inventory_limit_costs_a_second_trip_by_hand():
    # Two goal objects in the kitchen: with no limit go, take, take, go, drop, drop = 6;
    # holding one at a time it is (go, take, go, drop) twice = 8.
    for limit, expected in ((0, 6), (1, 8)):
        layout = _layout({"cup": 1, "mug": 1}, ("cup", "mug"), limit=limit)
        assert distance(layout, initial_state(layout)) == expected


def test_a_held_distractor_is_dropped_only_when_hands_are_needed_by_hand():
    # Holding the vase with a one-object limit: drop it, then go, take, go, drop = 5; with
    # two hands the vase can stay: go, take, go, drop = 4.
    for limit, expected in ((1, 5), (2, 4)):
        layout = _layout({"cup": 1, "vase": 0}, ("cup",), limit=limit)
        state = initial_state(layout)
        state.where["vase"] = CARRIED
        assert distance(layout, state) == expected
        assert _replay(layout, state) == expected


def test_a_goal_object_already_home_is_done():
    layout = _layout({"cup": 0, "mug": 3}, ("cup", "mug"))
    assert distance(layout, initial_state(layout)) == 6  # only the mug: as the corridor fetch


# Small worlds for the brute-force comparison (rooms, locks, objects, limit, distractors).
SMALL = [Knobs(4, 1, 1, 0, 1), Knobs(5, 2, 2, 1, 1), Knobs(5, 1, 2, 1, 1), Knobs(5, 2, 1, 0, 1),
         Knobs(6, 1, 3, 1, 0), Knobs(5, 1, 3, 2, 1), Knobs(6, 2, 2, 1, 1), Knobs(5, 0, 3, 1, 2),
         Knobs(6, 2, 3, 2, 0)]


def _exact_everywhere(knobs: Knobs, seed: int) -> int:
    layout = generate(random.Random(f"small/{seed}"), knobs)
    exact = exact_distances(layout)
    assert exact  # the start is solvable
    for d, state in exact.values():
        assert distance(layout, state) == d, (knobs, seed, state)
    return len(exact)


@pytest.mark.parametrize("knobs", [SMALL[1], SMALL[4], SMALL[6], SMALL[8]])
def test_planner_equals_brute_force_on_every_reachable_state(knobs):
    assert sum(_exact_everywhere(knobs, seed) for seed in range(2)) > 100


@pytest.mark.slow
@pytest.mark.parametrize("knobs", SMALL)
def test_planner_equals_brute_force_on_many_small_worlds(knobs):
    for seed in range(25):
        _exact_everywhere(knobs, seed)


def test_plans_replay_to_the_goal_from_random_states_of_every_preset():
    # Random valid actions from the start, then the plan from there must solve the world
    # in exactly distance() actions.
    for name, knobs in HORIZONS.items():
        for seed in range(4):
            rng = random.Random(seed)
            layout = generate(rng, knobs)
            state = initial_state(layout)
            for _ in range(30):
                _random_action(rng, layout, state)
                if solved(layout, state):
                    break
            if not solved(layout, state):
                assert _replay(layout, state.copy()) == distance(layout, state), name


def test_planner_searches_a_few_hundred_events_on_100_step_worlds(monkeypatch):
    """What keeps a call in milliseconds (planner.py): the search runs over events (keys and
    goal objects), not actions or rooms. Counted, not timed: the nodes it expands on xlong
    worlds (median plan ~100, 40 rooms), from the start and after 40 random actions."""
    expanded = [0]
    moves = planner._Problem.moves

    def counted(self: planner._Problem, node: planner.Node):
        expanded[0] += 1
        return moves(self, node)

    monkeypatch.setattr(planner._Problem, "moves", counted)
    rng = random.Random(0)
    counts = []
    for seed in range(10):
        layout = generate(random.Random(f"x/{seed}"), HORIZONS["xlong"])
        state = initial_state(layout)
        for when in range(2):
            expanded[0] = 0
            assert distance(layout, state) >= 40
            counts.append(expanded[0])
            for _ in range(40 * (1 - when) + 1):
                _random_action(rng, layout, state)
    # at this commit: 15 to 142 per call (median 35) for plans of 77 to 148 actions
    assert max(counts) <= 500 and sorted(counts)[len(counts) // 2] <= 100, counts


def _random_action(rng: random.Random, layout: Layout, state: WorldState) -> None:
    from tests.unit.envs.world.bruteforce import actions

    act(layout, state, rng.choice(actions(state)))

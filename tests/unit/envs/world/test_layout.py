"""World generation: a spanning tree on the grid, consistent compass directions, keys
reachable before their locks, every lock on the way to a goal object."""

from __future__ import annotations

import random

import pytest

from agent_r1_async.envs.world.args import HORIZONS, Knobs
from agent_r1_async.envs.world.layout import DIRECTIONS, OPPOSITE, Layout, generate


def _worlds(n: int = 25) -> list[tuple[str, Layout]]:
    return [(name, generate(random.Random(f"{name}/{seed}"), knobs))
            for name, knobs in HORIZONS.items() for seed in range(n)]


@pytest.mark.parametrize(("name", "layout"), _worlds())
def test_rooms_form_a_spanning_tree_on_distinct_grid_cells(name, layout):
    n = len(layout.names)
    assert n == HORIZONS[name].rooms and len(set(layout.names)) == n
    assert len(set(layout.cells)) == n  # one room per cell
    assert layout.parent[0] == -1 and all(0 <= p < n for p in layout.parent[1:])
    for room in range(1, n):  # every room reaches the start: n - 1 edges, connected = a tree
        seen, at = set(), room
        while at != 0:
            assert at not in seen
            seen.add(at)
            at = layout.parent[at]
    assert sum(len(e) for e in layout.exits) == 2 * (n - 1)


@pytest.mark.parametrize(("name", "layout"), _worlds())
def test_compass_directions_are_consistent(name, layout):
    for room, exits in enumerate(layout.exits):
        x, y = layout.cells[room]
        for way, nxt in exits.items():
            dx, dy = DIRECTIONS[way]
            assert layout.cells[nxt] == (x + dx, y + dy)  # north is one cell up, ...
            assert layout.exits[nxt][OPPOSITE[way]] == room  # ... and south leads back
            assert layout.parent[nxt] == room or layout.parent[room] == nxt  # a tree edge


@pytest.mark.parametrize(("name", "layout"), _worlds())
def test_every_key_is_reachable_before_its_lock_and_every_lock_guards_a_goal(name, layout):
    assert len(layout.locks) == HORIZONS[name].locks
    assert len(set(layout.locks.values())) == len(layout.locks)  # one color per door
    behind = {door: _subtree(layout, door) for door in layout.locks}
    for door, rooms in behind.items():
        assert any(layout.items[t] in rooms for t in layout.targets)
        assert layout.items[f"{layout.locks[door]} key"] not in rooms
    # Open the doors one by one, each with a key picked up in the rooms open so far.
    opened: set[int] = set()
    while len(opened) < len(layout.locks):
        reach = _reach(layout, opened)
        ready = [d for d in layout.locks if d not in opened and layout.parent[d] in reach
                 and layout.items[f"{layout.locks[d]} key"] in reach]
        assert ready, "a lock whose key cannot be reached"
        opened.add(ready[0])
    reach = _reach(layout, opened)
    assert all(layout.items[t] in reach for t in layout.targets)


def test_keys_form_a_chain_when_each_lock_opens_new_rooms():
    # Three locks in a corridor: start(0) - 1 - 2 - 3 with locks on every edge: the key of
    # lock j must lie in the room lock j-1 opened.
    knobs = Knobs(rooms=4, locks=3, objects=1, inventory_limit=0, distractors=0)
    for seed in range(200):
        layout = generate(random.Random(seed), knobs)
        if sorted(layout.locks) != [1, 2, 3] or layout.parent != (-1, 0, 1, 2):
            continue
        color = {door: layout.locks[door] for door in (1, 2, 3)}
        assert [layout.items[f"{color[d]} key"] for d in (1, 2, 3)] == [0, 1, 2]
        return
    pytest.fail("no corridor world among 200 seeds")


def test_generation_is_deterministic_and_the_hash_names_the_world():
    knobs = HORIZONS["long"]
    a, b = generate(random.Random(7), knobs), generate(random.Random(7), knobs)
    assert a == b and a.digest() == b.digest()
    assert generate(random.Random(8), knobs).digest() != a.digest()


def _subtree(layout: Layout, top: int) -> set[int]:
    return {r for r in range(len(layout.names)) if layout.up[r] >> top & 1}


def _reach(layout: Layout, opened: set[int]) -> set[int]:
    seen, todo = {0}, [0]
    while todo:
        room = todo.pop()
        for nxt in layout.exits[room].values():
            door = layout.door_between(room, nxt)
            if nxt not in seen and (door is None or door in opened):
                seen.add(nxt)
                todo.append(nxt)
    return seen

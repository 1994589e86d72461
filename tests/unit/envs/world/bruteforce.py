"""The reference the planner is tested against: breadth-first search over every action of the
full game (every direction, every item, drops anywhere), on small worlds.

`exact_distances(layout)` enumerates every state reachable from the start, then searches
backward from the solved states, so it gives the exact optimal remaining length d(s) of every
reachable state at once. An episode ends when the goal is reached, so solved states have no
successors.
"""

from __future__ import annotations

from collections import deque

from agent_r1_async.envs.world.layout import DIRECTIONS, Layout
from agent_r1_async.envs.world.state import (
    CARRIED,
    Action,
    WorldState,
    act,
    initial_state,
    items_in,
    solved,
)


def actions(state: WorldState) -> list[Action]:
    """Every action that could change the state (look and inventory never do)."""
    out: list[Action] = [("go", w) for w in DIRECTIONS] + [("unlock", w) for w in DIRECTIONS]
    out += [("take", item) for item in items_in(state, state.room)]
    out += [("drop", item) for item, at in sorted(state.where.items()) if at == CARRIED]
    return out


def exact_distances(layout: Layout) -> dict[tuple, tuple[int, WorldState]]:
    """State key -> (optimal remaining length, the state) for every reachable state."""
    start = initial_state(layout)
    states = {start.key(): start}
    preds: dict[tuple, list[tuple]] = {start.key(): []}
    todo = deque([start])
    goals = []
    while todo:
        state = todo.popleft()
        if solved(layout, state):
            goals.append(state.key())
            continue
        for action in actions(state):
            nxt = state.copy()
            if not act(layout, nxt, action).changed:
                continue
            key = nxt.key()
            if key not in states:
                states[key] = nxt
                preds[key] = []
                todo.append(nxt)
            preds[key].append(state.key())
    dist = {key: 0 for key in goals}
    queue = deque(goals)
    while queue:
        key = queue.popleft()
        for prev in preds[key]:
            if prev not in dist:
                dist[prev] = dist[key] + 1
                queue.append(prev)
    return {key: (d, states[key]) for key, d in dist.items()}

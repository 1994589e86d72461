"""A demonstrator that knows only what the agent reads: it explores.

The planner (planner.py) sees the whole world, so its plan walks straight to goal objects the
agent has not seen yet. An agent that imitates it must guess which exit leads to them: its
first room's description does not say. The explorer acts on what the agent has read instead:
the task (the goal objects, the start room, the hands' limit) and each room's description as
the world prints it (`state.describe`: the room, its exits with their locked doors, its
items), parsed from that very text, plus what its own actions did. Every action it takes is
therefore a function of the episode's history, which a policy with the whole history in its
context can learn.

Its rule, each turn, first that applies:
1. in the start room holding goal objects: drop one;
2. a key lies here: take it (keys never fill the hands, and a door of its color may turn up
   later);
3. holding every goal object still away from the start room, or hands full: walk home;
4. a goal object still needed lies here: take it;
5. walk to the nearest goal object it still needs and has seen (then take it); else to the
   nearest locked door whose key it holds (then unlock it: locks sit on the way to goal
   objects); else to the nearest exit it has not walked through (then go through it). Ties go
   to the room seen first, then to the direction in `DIRECTIONS` order.

On a tree every exit not yet walked leads to a room not yet seen, so the rule explores each
room at most once, and each key lies on its lock's reachable side (layout.py), so it never
runs out of moves before the task is solved. It is not optimal: it walks into dead ends the
planner skips. Its length against the planner's is measured in docs/environments.md.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from agent_r1_async.envs.world.layout import DIRECTIONS, OPPOSITE, Layout
from agent_r1_async.envs.world.state import Action, act, describe, initial_state, solved

_EXITS = re.compile(r"(north|south|east|west)(?: \((\w+) door, locked\))?(?:, |$)")


@dataclass
class _Room:
    """One room as the agent read it, kept up to date by its own actions."""

    exits: dict[str, str | None]
    """Direction -> the door's color while it is locked, else None."""
    items: set[str]
    through: dict[str, str] = field(default_factory=dict)
    """Direction -> the room on the far side, for the exits walked through."""


def read_room(text: str) -> tuple[str, dict[str, str | None], list[str]]:
    """A room's description as `state.describe` prints it, read back: its name, its exits
    (a locked door's color, else None) and its items."""
    m = re.fullmatch(r"(.+?)\. Exits: (.*?)\.(?: Items: (.*)\.| No items\.)", text)
    if m is None:
        raise ValueError(f"not a room description: {text!r}")
    found = list(_EXITS.finditer(m[2]))
    if "".join(e[0] for e in found) != m[2]:
        raise ValueError(f"not a list of exits: {m[2]!r} in {text!r}")
    exits: dict[str, str | None] = {e[1]: e[2] for e in found}
    items = m[3].split(", ") if m[3] else []
    return m[1].lower(), exits, items


class Explorer:
    """The explorer's knowledge and rule (module docstring). `see` the start room's
    description, then alternate `next_action` and `observe`."""

    def __init__(self, targets: tuple[str, ...], home: str, limit: int) -> None:
        self.targets, self.home, self.limit = targets, home, limit
        self.rooms: dict[str, _Room] = {}
        self.here = home
        self.held: set[str] = set()

    def see(self, text: str) -> None:
        """A room description: the agent stands in that room."""
        name, exits, items = read_room(text)
        room = self.rooms.get(name)
        if room is None:
            self.rooms[name] = _Room(exits, set(items))
        else:
            room.exits, room.items = exits, set(items)
        self.here = name

    def observe(self, action: Action, text: str) -> None:
        """What the world answered to `action`, which it accepted."""
        tool, arg = action
        room = self.rooms[self.here]
        if tool == "go":
            came_from = self.here
            self.see(text)
            room.through[arg] = self.here
            self.rooms[self.here].through[OPPOSITE[arg]] = came_from
        elif tool == "take":
            room.items.discard(arg)
            self.held.add(arg)
        elif tool == "drop":
            self.held.discard(arg)
            room.items.add(arg)
        elif tool == "unlock":
            color = room.exits[arg]
            room.exits[arg] = None
            self.held.discard(f"{color} key")

    def _home(self) -> set[str]:
        return self.rooms[self.home].items if self.home in self.rooms else set()

    def next_action(self) -> Action | None:
        """The rule's action, or None when it has none (the task is solved or unsolvable)."""
        home = self._home()
        left = [t for t in self.targets if t not in home]
        held = [t for t in left if t in self.held]
        if self.here == self.home and held:
            return "drop", held[0]
        if not left:
            return None
        room = self.rooms[self.here]
        keys = sorted(i for i in room.items if i.endswith(" key"))
        if keys:
            return "take", keys[0]
        needed = [t for t in left if t not in self.held]
        if not needed or (self.limit and len(held) >= self.limit):
            return self._toward(self.home, self._routes())
        for item in needed:
            if item in room.items:
                return "take", item
        routes = self._routes()
        best: tuple[tuple[int, int, int, int], str, Action] | None = None
        for order, (name, seen) in enumerate(self.rooms.items()):
            if name not in routes:
                continue
            options: list[tuple[int, int, Action]] = [
                (0, 0, ("take", t)) for t in needed if t in seen.items]
            for i, way in enumerate(DIRECTIONS):
                if way not in seen.exits:
                    continue
                color = seen.exits[way]
                if color is not None and f"{color} key" in self.held:
                    options.append((1, i, ("unlock", way)))
                elif color is None and way not in seen.through:
                    options.append((2, i, ("go", way)))
            for rank, i, action in options:
                key = (rank, routes[name][0], order, i)
                if best is None or key < best[0]:
                    best = (key, name, action)
        if best is None:
            return None
        _, name, action = best
        return action if name == self.here else self._toward(name, routes)

    def _routes(self) -> dict[str, tuple[int, str]]:
        """Each room reachable over the exits walked: its distance from here and the first
        move toward it ("" for here)."""
        routes, queue = {self.here: (0, "")}, deque([self.here])
        while queue:
            at = queue.popleft()
            dist, first = routes[at]
            for way, nxt in self.rooms[at].through.items():
                if nxt not in routes:
                    routes[nxt] = (dist + 1, first or way)
                    queue.append(nxt)
        return routes

    @staticmethod
    def _toward(goal: str, routes: dict[str, tuple[int, str]]) -> Action | None:
        """The first move on the walked path from here to `goal` (None: here or unreachable)."""
        first = routes.get(goal, (0, ""))[1]
        return ("go", first) if first else None


def explore(layout: Layout, max_actions: int = 1000) -> list[Action] | None:
    """The explorer's actions from the start until the task is solved (None if it gets stuck
    or needs more than `max_actions`), played against the world and fed its answers."""
    state = initial_state(layout)
    explorer = Explorer(layout.targets, layout.names[layout.start], layout.inventory_limit)
    explorer.see(describe(layout, state))
    actions: list[Action] = []
    while not solved(layout, state):
        action = explorer.next_action()
        if action is None or len(actions) >= max_actions:
            return None
        outcome = act(layout, state, action)
        if not outcome.valid:
            raise AssertionError(f"the explorer's {action} was refused: {outcome.text}")
        explorer.observe(action, outcome.text)
        actions.append(action)
    return actions

"""The oracle: an optimal plan, and its length d(s), from any state of a world.

Decomposition. On a tree the way between two rooms is unique, so a plan is fixed by the
order of its *events* (take the keys and goal objects lying in a room; drop what is held in
the start room) and the walk between events is the tree path, with an unlock inserted at
each locked door it crosses. The search runs A* over event states
(room, keys got, goal objects taken, goal objects delivered), edge cost = path length + the
events' actions, with an admissible bound (below); its size is set by the locks and goal
objects, not by the rooms, which keeps a call in milliseconds on 100-step plans.

Why the events suffice (so the result is the exact optimum of the full game, as the
brute-force search over every action in the tests confirms on small worlds):
- every locked door hides a goal object (generation puts locks only on the way to one, and
  what lies behind a locked door cannot have been moved), so each locked door is unlocked
  exactly once and each of its keys taken: a fixed count, whatever the order;
- keys go on a key ring and do not fill the hands, so a key is taken on the first visit to
  its room and never dropped; with no inventory limit the same holds for goal objects,
  which are then dropped together at the end;
- a goal object on the start room's floor is done; dropping what is held in the start room
  when passing there is never worse (it frees the hands at no extra cost);
- distractors are never taken; distractor objects already held are dropped first, as many
  as the plan needs free hands for (the search tries each count);
- looking and listing the inventory change nothing.
What is not searched: dropping a goal object or a key outside the start room to pick it up
again later. On unit-size objects and a tree this never shortens a plan; the brute-force
comparison is the check.

Bound: the walk from the agent's room through every room still to visit back to the start
crosses each edge of their Steiner tree at least twice, once for edges on the agent's own way
back; an edge whose far side holds n goal objects to carry out is crossed toward the start at
least ceil(n / limit) times.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from agent_r1_async.envs.world.layout import Layout
from agent_r1_async.envs.world.state import CARRIED, Action, WorldState

NO_PLAN = 10**9
"""d(s) of a state from which the goal cannot be reached (never seen in generated worlds)."""

Node = tuple[int, int, int, int]
"""(room, keys got, goal objects taken, goal objects delivered): masks over `_Problem`'s
locks and targets."""
Event = tuple[int, tuple[str, ...], tuple[str, ...]]
"""(room to go to, items to take there, items to drop there)."""


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@dataclass
class _Problem:
    """What is left to do from one state, indexed for the search."""

    layout: Layout
    keys: list[str]
    """The keys of the doors still locked (index j)."""
    key_edge: list[int]
    """Edge bit of door j."""
    key_room: list[int]
    """Room of key j (-1 when carried)."""
    targets: list[str]
    """Goal objects not in the start room yet (index i)."""
    target_room: list[int]
    """Room of target i (-1 when carried)."""
    limit: int
    """Free hands for goal objects (0: no limit)."""

    def __post_init__(self) -> None:
        self.all_targets = (1 << len(self.targets)) - 1
        self.keys_at: dict[int, int] = {}
        self.targets_at: dict[int, int] = {}
        for j, room in enumerate(self.key_room):
            if room >= 0:
                self.keys_at[room] = self.keys_at.get(room, 0) | 1 << j
        for i, room in enumerate(self.target_room):
            if room >= 0:
                self.targets_at[room] = self.targets_at.get(room, 0) | 1 << i

    def start(self, room: int) -> Node:
        got = sum(1 << j for j, r in enumerate(self.key_room) if r < 0)
        taken = sum(1 << i for i, r in enumerate(self.target_room) if r < 0)
        return room, got, taken, 0

    def bound(self, node: Node) -> int:
        """A lower bound on the actions left (admissible)."""
        room, got, taken, done = node
        if done == self.all_targets:
            return 0
        up = self.layout.up
        cover = up[room]
        left = 0
        for j in _bits(~got & ((1 << len(self.keys)) - 1)):
            cover |= up[self.key_room[j]]
            left += 1
        untaken = ~taken & self.all_targets
        for i in _bits(untaken):
            cover |= up[self.target_room[i]]
        held = (taken & ~done).bit_count()
        left += untaken.bit_count() + (self.all_targets & ~done).bit_count()
        walk = 2 * cover.bit_count() - up[room].bit_count()
        return walk + left + self._carry_bound(room, untaken, held)

    def _carry_bound(self, room: int, untaken: int, held: int) -> int:
        """Extra crossings of edges whose far side holds more than `limit` objects to carry."""
        k = self.limit
        if not k or untaken.bit_count() + held <= k:
            return 0
        up = self.layout.up
        load: dict[int, int] = {}
        for i in _bits(untaken):
            for e in _bits(up[self.target_room[i]]):
                load[e] = load.get(e, 0) + 1
        if held:
            for e in _bits(up[room]):
                load[e] = load.get(e, 0) + held
        return sum(2 * (math.ceil(n / k) - 1) for n in load.values() if n > k)

    def moves(self, node: Node) -> list[tuple[Node, int, Event]]:
        """The next events from `node`: (node after, actions, event)."""
        room, got, taken, done = node
        up = self.layout.up
        closed = 0
        for j in _bits(~got & ((1 << len(self.keys)) - 1)):
            closed |= self.key_edge[j]
        sites = {self.key_room[j] for j in _bits(~got & ((1 << len(self.keys)) - 1))}
        sites |= {self.target_room[i] for i in _bits(~taken & self.all_targets)}
        held = taken & ~done
        out: list[tuple[Node, int, Event]] = []
        for site in sorted(sites):
            way = up[room] ^ up[site]
            if way & closed:
                continue
            dist = way.bit_count()
            new_keys = self.keys_at.get(site, 0) & ~got
            new_targets = self.targets_at.get(site, 0) & ~taken
            keys = tuple(self.keys[j] for j in _bits(new_keys))
            got2 = got | new_keys
            if not self.limit:
                objs = tuple(self.targets[i] for i in _bits(new_targets))
                out.append(((site, got2, taken | new_targets, done),
                            dist + len(keys) + len(objs), (site, keys + objs, ())))
                continue
            if new_keys:
                out.append(((site, got2, taken, done), dist + len(keys), (site, keys, ())))
            if held.bit_count() < self.limit:
                for i in _bits(new_targets):
                    out.append(((site, got2, taken | 1 << i, done), dist + len(keys) + 1,
                                (site, (*keys, self.targets[i]), ())))
        if held and (self.limit or taken == self.all_targets):
            drops = tuple(self.targets[i] for i in _bits(held))
            out.append(((0, got, taken, done | held), up[room].bit_count() + len(drops),
                        (0, (), drops)))
        return out


def _search(problem: _Problem, room: int) -> tuple[int, list[Event]]:
    """A*: the fewest actions to the goal and the events of one optimal plan."""
    start = problem.start(room)
    best = {start: 0}
    back: dict[Node, tuple[Node, Event]] = {}
    tie = 0
    heap = [(problem.bound(start), 0, tie, start)]
    while heap:
        _, neg_g, _, node = heapq.heappop(heap)
        g = -neg_g
        if g > best[node]:
            continue
        if node[3] == problem.all_targets:
            events: list[Event] = []
            while node in back:
                node, event = back[node]
                events.append(event)
            return g, events[::-1]
        for nxt, cost, event in problem.moves(node):
            g2 = g + cost
            if g2 < best.get(nxt, NO_PLAN):
                best[nxt], back[nxt] = g2, (node, event)
                tie += 1
                heapq.heappush(heap, (g2 + problem.bound(nxt), -g2, tie, nxt))
    return NO_PLAN, []


def _problem(layout: Layout, state: WorldState, limit: int) -> _Problem:
    locked = sorted(c for c in layout.locks if c not in state.opened)
    keys = [layout.key_of(layout.locks[c]) for c in locked]
    targets = [t for t in layout.targets if state.where[t] != layout.start]
    return _Problem(
        layout, keys, [1 << c for c in locked], [state.where[k] for k in keys],
        targets, [state.where[t] for t in targets], limit)


def _expand(layout: Layout, state: WorldState, drops: list[str], events: list[Event],
            ) -> list[Action]:
    actions: list[Action] = [("drop", item) for item in drops]
    room, opened = state.room, set(state.opened)
    for site, takes, puts in events:
        for nxt in layout.path(room, site):
            door = layout.door_between(room, nxt)
            if door is not None and door not in opened:
                actions.append(("unlock", layout.way(room, nxt)))
                opened.add(door)
            actions.append(("go", layout.way(room, nxt)))
            room = nxt
        actions += [("take", item) for item in takes]
        actions += [("drop", item) for item in puts]
    return actions


def plan(layout: Layout, state: WorldState) -> list[Action] | None:
    """One optimal plan from `state` (empty when solved); None when there is none."""
    held = [i for i, at in state.where.items()
            if at == CARRIED and not layout.is_key(i) and i not in layout.targets]
    limit = layout.inventory_limit
    best: tuple[int, list[str], list[Event]] | None = None
    for m in range(len(held) + 1 if limit else 1):
        hands = limit - (len(held) - m) if limit else 0
        if limit and hands < 1:
            continue
        cost, events = _search(_problem(layout, state, hands), state.room)
        if cost < NO_PLAN and (best is None or m + cost < best[0]):
            best = (m + cost, sorted(held)[:m], events)
    if best is None:
        return None
    return _expand(layout, state, best[1], best[2])


def distance(layout: Layout, state: WorldState) -> int:
    """d(s): the length of an optimal plan from `state` (`NO_PLAN` when there is none)."""
    actions = plan(layout, state)
    return NO_PLAN if actions is None else len(actions)

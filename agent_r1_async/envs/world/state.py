"""What the agent changes in a world, and the rules of each action.

A state is the agent's room, where every item is (a room, carried, or used up: a key stays
in the lock it opened) and which doors are unlocked. `act` applies one action and answers
with a short sentence; an action the world refuses (no exit that way, a locked door, an item
not here, full hands, no matching key) changes nothing and is marked invalid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_r1_async.envs.world.layout import DIRECTIONS, Layout

CARRIED = -1
"""`WorldState.where` of an item the agent holds."""
USED = -2
"""`WorldState.where` of a key left in the lock it opened."""

Action = tuple[str, str]
"""(tool, argument): ("go", "north"), ("take", "cup"), ("look", "")."""


@dataclass
class WorldState:
    room: int
    where: dict[str, int]
    """Item -> room, `CARRIED` or `USED`."""
    opened: set[int] = field(default_factory=set)
    """Child rooms of the unlocked doors."""

    def key(self) -> tuple:
        """A hashable snapshot (equal states, equal keys)."""
        return self.room, tuple(sorted(self.where.items())), frozenset(self.opened)

    def copy(self) -> WorldState:
        return WorldState(self.room, dict(self.where), set(self.opened))


@dataclass(frozen=True)
class Outcome:
    text: str
    valid: bool
    """The world accepted the action."""
    changed: bool
    """The state changed (look and inventory never change it)."""


def initial_state(layout: Layout) -> WorldState:
    return WorldState(layout.start, dict(layout.items))


def solved(layout: Layout, state: WorldState) -> bool:
    """Every goal object lies in the start room."""
    return all(state.where[t] == layout.start for t in layout.targets)


def carried(state: WorldState) -> list[str]:
    return sorted(item for item, at in state.where.items() if at == CARRIED)


def objects_held(layout: Layout, state: WorldState) -> int:
    return sum(not layout.is_key(item) for item in carried(state))


def items_in(state: WorldState, room: int) -> list[str]:
    return sorted(item for item, at in state.where.items() if at == room)


def normalize(text: str) -> str:
    """An argument as the world reads it: lowercase, single spaces, no leading article."""
    words = text.lower().split()
    if words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(words)


def describe(layout: Layout, state: WorldState) -> str:
    """The room: name, exits (locked doors named by color), items."""
    room = state.room
    exits = []
    for way in DIRECTIONS:
        if way not in layout.exits[room]:
            continue
        door = layout.door_between(room, layout.exits[room][way])
        if door is not None and door not in state.opened:
            exits.append(f"{way} ({layout.locks[door]} door, locked)")
        else:
            exits.append(way)
    items = items_in(state, room)
    here = f" Items: {', '.join(items)}." if items else " No items."
    return f"{layout.names[room].capitalize()}. Exits: {', '.join(exits)}.{here}"


def _listing(names: list[str]) -> str:
    named = [f"the {n}" for n in names]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def _refuse(text: str) -> Outcome:
    return Outcome(text, valid=False, changed=False)


def _go(layout: Layout, state: WorldState, way: str) -> Outcome:
    nxt = layout.exits[state.room].get(way)
    if nxt is None:
        return _refuse(f"There is no exit to the {way}.")
    door = layout.door_between(state.room, nxt)
    if door is not None and door not in state.opened:
        return _refuse(f"The {layout.locks[door]} door to the {way} is locked.")
    state.room = nxt
    return Outcome(describe(layout, state), valid=True, changed=True)


def _take(layout: Layout, state: WorldState, item: str) -> Outcome:
    if state.where.get(item) != state.room:
        return _refuse(f"There is no {item} here.")
    limit = layout.inventory_limit
    if limit and not layout.is_key(item) and objects_held(layout, state) >= limit:
        return _refuse(f"Your hands are full ({limit} objects): drop one first.")
    state.where[item] = CARRIED
    return Outcome(f"You take the {item}.", valid=True, changed=True)


def _drop(layout: Layout, state: WorldState, item: str) -> Outcome:
    if state.where.get(item) != CARRIED:
        return _refuse(f"You do not carry a {item}.")
    state.where[item] = state.room
    text = f"You drop the {item}."
    if solved(layout, state):
        text += f" Every goal object is in the {layout.names[layout.start]}: done!"
    return Outcome(text, valid=True, changed=True)


def _unlock(layout: Layout, state: WorldState, way: str) -> Outcome:
    nxt = layout.exits[state.room].get(way)
    door = None if nxt is None else layout.door_between(state.room, nxt)
    if door is None or door in state.opened:
        return _refuse(f"There is no locked door to the {way}.")
    key = layout.key_of(layout.locks[door])
    if state.where.get(key) != CARRIED:
        return _refuse(f"You need the {key}.")
    state.opened.add(door)
    state.where[key] = USED
    return Outcome(f"You unlock the {layout.locks[door]} door with the {key}.",
                   valid=True, changed=True)


def act(layout: Layout, state: WorldState, action: Action) -> Outcome:
    """Apply `action` to `state` (in place); what the agent is told."""
    tool, arg = action
    if tool == "go":
        return _go(layout, state, arg)
    if tool == "take":
        return _take(layout, state, normalize(arg))
    if tool == "drop":
        return _drop(layout, state, normalize(arg))
    if tool == "unlock":
        return _unlock(layout, state, arg)
    if tool == "look":
        return Outcome(describe(layout, state), valid=True, changed=False)
    if tool == "inventory":
        held = carried(state)
        text = f"You carry {_listing(held)}." if held else "You carry nothing."
        return Outcome(text, valid=True, changed=False)
    raise ValueError(f"unknown world action {tool!r}")

"""World generation: rooms on a random spanning tree over a grid, locked doors on the way to
the goal objects, a key for each lock on its reachable side, and distractors.

- Rooms occupy grid cells; the tree grows one room at a time next to an existing one (half
  the time the newest, else a random one, which gives both corridors and branches). An exit
  joins a room and its tree parent, so `north` always leads one cell up and back `south`.
- Room 0 is the start room and the tree's root: every other room's exit toward the start
  is the edge to its parent, so an edge is named by its child room.
- Locks sit on edges of the paths from the start to the goal objects (each lock's far side
  holds a goal object). Keys form a dependency chain: the locks are opened in an order where
  each one's near room is reachable once the earlier ones are open, and the key of the j-th
  lies in the rooms that the (j-1)-th lock opened (the first key in the rooms open from the
  start), so every key is reachable before its lock.
- Names: rooms, door colors and objects are drawn from fixed palettes (`Palette`); each
  world's names are distinct, so an item's name says which item it is.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from agent_r1_async.envs.world.args import Knobs

DIRECTIONS: dict[str, tuple[int, int]] = {
    "north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

ROOM_NAMES = (
    "hall", "kitchen", "library", "pantry", "cellar", "attic", "study", "gallery", "bedroom",
    "bathroom", "garage", "workshop", "nursery", "office", "chapel", "armory", "laundry",
    "ballroom", "conservatory", "lounge", "parlor", "scullery", "larder", "vault", "foyer",
    "den", "loft", "porch", "sunroom", "storeroom", "cloakroom", "dining room", "music room",
    "billiard room", "wine cellar", "boiler room", "guest room", "tower", "greenhouse",
    "observatory", "kennel", "stable", "forge", "bakery", "archive", "salon",
)
COLORS = ("red", "blue", "green", "yellow", "white", "black", "purple", "orange")
OBJECTS = (
    "ball", "cup", "lamp", "book", "vase", "coin", "hat", "map", "bell", "clock", "comb",
    "doll", "drum", "fork", "glove", "jar", "kite", "mug", "pen", "ring", "shoe", "spoon",
    "candle", "mirror", "basket", "bottle", "brush", "flute", "scarf", "teapot",
)


@dataclass(frozen=True)
class Palette:
    """The names one world may use: `targets` for goal objects, `colors` for locks and keys,
    `objects` for distractor objects."""

    colors: tuple[str, ...] = COLORS
    targets: tuple[str, ...] = OBJECTS
    objects: tuple[str, ...] = OBJECTS


@dataclass(frozen=True)
class Layout:
    """One generated world (static: what the agent changes lives in `state.WorldState`)."""

    names: tuple[str, ...]
    """Room names; room 0 is the start room."""
    cells: tuple[tuple[int, int], ...]
    """Each room's grid cell."""
    parent: tuple[int, ...]
    """Each room's tree parent (-1 for the start room)."""
    locks: dict[int, str]
    """Child room of a locked edge -> the door's color."""
    items: dict[str, int]
    """Item name -> the room it lies in at the start (keys are named "<color> key")."""
    targets: tuple[str, ...]
    """The goal objects, to be dropped in the start room."""
    inventory_limit: int
    """Objects held at once (0: no limit); keys do not count."""
    exits: tuple[dict[str, int], ...] = field(init=False, compare=False, repr=False)
    """Each room's exits: direction -> neighbouring room."""
    up: tuple[int, ...] = field(init=False, compare=False, repr=False)
    """Each room's path to the start room as a bitmask of edges (bit c: the edge from room c
    to its parent): the distance of rooms a and b is popcount(up[a] ^ up[b])."""

    def __post_init__(self) -> None:
        up: list[int] = []
        for room in range(len(self.parent)):
            mask, at = 0, room
            while self.parent[at] >= 0:
                mask, at = mask | 1 << at, self.parent[at]
            up.append(mask)
        object.__setattr__(self, "up", tuple(up))
        exits: list[dict[str, int]] = [{} for _ in self.names]
        for child, par in enumerate(self.parent):
            if par < 0:
                continue
            (cx, cy), (px, py) = self.cells[child], self.cells[par]
            way = next(d for d, (dx, dy) in DIRECTIONS.items() if (px + dx, py + dy) == (cx, cy))
            exits[par][way], exits[child][OPPOSITE[way]] = child, par
        object.__setattr__(self, "exits", tuple(exits))

    @property
    def start(self) -> int:
        return 0

    def key_of(self, color: str) -> str:
        return f"{color} key"

    def is_key(self, item: str) -> bool:
        return item.endswith(" key")

    def distance(self, a: int, b: int) -> int:
        """Moves between rooms a and b (the tree path is the only one)."""
        return (self.up[a] ^ self.up[b]).bit_count()

    def path(self, a: int, b: int) -> list[int]:
        """The rooms after `a` on the way to `b`."""
        ancestors = [a]
        while self.parent[ancestors[-1]] >= 0:
            ancestors.append(self.parent[ancestors[-1]])
        down, at = [], b
        while at not in ancestors:
            down.append(at)
            at = self.parent[at]
        return ancestors[1:ancestors.index(at) + 1] + down[::-1]

    def way(self, a: int, b: int) -> str:
        """The direction from room a to its neighbour b."""
        return next(w for w, room in self.exits[a].items() if room == b)

    def door_between(self, a: int, b: int) -> int | None:
        """The locked edge's child room when the edge a-b has a lock, else None."""
        child = a if self.parent[a] == b else b
        return child if child in self.locks else None

    def digest(self) -> str:
        """A hash of everything that makes the world what it is (split deduplication)."""
        blob = json.dumps([self.names, self.cells, self.parent, sorted(self.locks.items()),
                           sorted(self.items.items()), self.targets, self.inventory_limit])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _grow_tree(rng: random.Random, rooms: int) -> tuple[list[tuple[int, int]], list[int]]:
    cells, parent = [(0, 0)], [-1]
    taken = {(0, 0)}
    while len(cells) < rooms:
        base = len(cells) - 1 if rng.random() < 0.5 else rng.randrange(len(cells))
        x, y = cells[base]
        free = [(x + dx, y + dy) for dx, dy in DIRECTIONS.values() if (x + dx, y + dy) not in taken]
        if not free:
            continue
        cell = rng.choice(free)
        cells.append(cell)
        parent.append(base)
        taken.add(cell)
    return cells, parent


def _root_path(parent: list[int], room: int) -> list[int]:
    """The child rooms of the edges from `room` up to the start room."""
    out = []
    while parent[room] >= 0:
        out.append(room)
        room = parent[room]
    return out


def _region(parent: list[int], start: int, closed: set[int]) -> set[int]:
    """Rooms reachable from `start` (a room on the start's side) without crossing `closed`."""
    children: dict[int, list[int]] = {}
    for child, par in enumerate(parent):
        children.setdefault(par, []).append(child)
    seen, todo = {start}, [start]
    while todo:
        room = todo.pop()
        for nxt in children.get(room, []):
            if nxt not in closed and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def generate(rng: random.Random, knobs: Knobs, palette: Palette = Palette()) -> Layout:
    """One world of size `knobs`, names drawn from `palette`."""
    cells, parent = _grow_tree(rng, knobs.rooms)
    names = rng.sample(ROOM_NAMES, knobs.rooms)
    others = list(range(1, knobs.rooms))
    target_rooms = [rng.choice(others) for _ in range(knobs.objects)]
    on_way = sorted({c for room in target_rooms for c in _root_path(parent, room)})
    lock_rooms = rng.sample(on_way, min(knobs.locks, len(on_way)))
    colors = rng.sample(palette.colors, len(lock_rooms))
    items: dict[str, int] = {}
    # Keys: open the locks in a frontier order; key j lies where lock j-1 opened.
    closed, opened_last = set(lock_rooms), _region(parent, 0, set(lock_rooms)) - {0}
    reach = _region(parent, 0, closed)
    locks: dict[int, str] = {}
    for color in colors:
        frontier = [c for c in sorted(closed) if parent[c] in reach]
        door = rng.choice(frontier)
        spots = sorted(opened_last) or sorted(reach)
        items[f"{color} key"] = rng.choice(spots)
        locks[door] = color
        closed.discard(door)
        grown = _region(parent, 0, closed)
        opened_last, reach = grown - reach, grown
    targets = tuple(rng.sample(palette.targets, knobs.objects))
    for name, room in zip(targets, target_rooms, strict=True):
        items[name] = room
    spare_colors = [c for c in palette.colors if c not in colors]
    spare_objects = [o for o in palette.objects if o not in targets]
    for _ in range(knobs.distractors):
        if spare_colors and rng.random() < 0.25:
            name = f"{spare_colors.pop(rng.randrange(len(spare_colors)))} key"
        else:
            name = spare_objects.pop(rng.randrange(len(spare_objects)))
        items[name] = rng.randrange(knobs.rooms)
    return Layout(tuple(names), tuple(cells), tuple(parent), locks, items, targets,
                  knobs.inventory_limit)

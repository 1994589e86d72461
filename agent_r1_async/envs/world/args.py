"""`env.args` of the `world` env: a named horizon preset (or a weighted mix of presets),
explicit knobs that override it, splits and rewards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

Horizon = Literal["short", "medium", "long", "xlong"]


@dataclass(frozen=True)
class Knobs:
    """The size of one world: what decides how long its optimal plan is."""

    rooms: int
    """Rooms on the spanning tree (the start room included)."""
    locks: int
    """Locked doors on the way to the goal objects, each with its key somewhere reachable."""
    objects: int
    """Goal objects to bring to the start room (1: a fetch task, more: a collect task)."""
    inventory_limit: int
    """Objects the agent can hold at once (0: no limit); keys go on a key ring and never count."""
    distractors: int
    """Items lying about that the goal does not need (objects, and keys that open nothing)."""


HORIZONS: dict[str, Knobs] = {
    "short": Knobs(rooms=4, locks=0, objects=1, inventory_limit=0, distractors=1),
    "medium": Knobs(rooms=14, locks=1, objects=2, inventory_limit=0, distractors=3),
    "long": Knobs(rooms=22, locks=2, objects=4, inventory_limit=2, distractors=4),
    "xlong": Knobs(rooms=40, locks=5, objects=6, inventory_limit=1, distractors=8),
}
"""The presets; docs/environments.md has each one's measured optimal-plan lengths."""
SUGGESTED_MAX_TURNS = {"short": 24, "medium": 64, "long": 128, "xlong": 320}
"""`env.max_turns` for each preset: about 3x its median optimal plan, and above the longest
plan measured and the explorer's longest (docs/environments.md)."""

MAX_ROOMS = 40
MAX_LOCKS = 6
MAX_OBJECTS = 8
MAX_DISTRACTORS = 12
MAX_TASKS = 40_000
"""Tasks per split at most: a split's seeds (20 per task, for skipped duplicates) stay inside
its own seed range."""


class WorldArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    horizon: Horizon = "medium"
    """The preset the knobs below start from (`HORIZONS`)."""
    mix: dict[Horizon, float] | None = None
    """Draw each world's preset from these weights instead of `horizon`, e.g.
    {short: 0.75, medium: 0.15, long: 0.1}: a heavy-tailed mix of horizons in one run. Each
    task then ends after its own preset's `SUGGESTED_MAX_TURNS` actions (at most
    `env.max_turns`). Excludes the explicit knobs below."""
    rooms: int | None = None
    """Rooms per world (None: the preset's)."""
    locks: int | None = None
    """Locked doors per world (None: the preset's)."""
    objects: int | None = None
    """Goal objects per world (None: the preset's)."""
    inventory_limit: int | None = None
    """Objects held at once, 0 = no limit (None: the preset's)."""
    distractors: int | None = None
    """Items the goal does not need (None: the preset's)."""
    seed: int = 0
    """Base seed; each split takes its worlds from its own seed range."""
    num_train: int = 2000
    """Worlds in the train split (at most `MAX_TASKS`)."""
    num_dev: int = 100
    """Worlds in the dev split (at most `MAX_TASKS`)."""
    num_test: int = 200
    """Worlds in the test split (at most `MAX_TASKS`)."""
    held_out: bool = True
    """Keep the held-out compositions (tasks.py) out of train."""
    progress_reward: float = 1.0
    """Process reward a solved episode earns in all, paid as the optimal remaining plan
    shrinks: r_t = progress_reward * (d(s_{t-1}) - d(s_t)) / d(s_0)."""
    invalid_action_penalty: float = -0.01
    """Process reward of an action the world refuses or a malformed call."""
    success_reward: float = 1.0
    """Outcome reward when every goal object lies in the start room."""
    end_after_repeats: int = 0
    """End the episode (unsolved) when the agent sends the same action and the world gives the
    same answer this many times in a row: the state did not change in between (a refused
    action, `look`, `inventory`), so the agent is stuck. 0: never; the episode runs to
    `env.max_turns`."""
    demo_detours: float = 0.0
    """Warm start: before each demonstrator action, with this probability, a mistake the world
    refuses, shown in the demonstration but not trained on (detours.py), so the warm start
    sees recoveries. 0: flawless demonstrations."""
    demonstrator: Literal["explorer", "planner"] = "explorer"
    """Who plays the warm start's demonstrations (`oracle(task)`): `explorer` acts only on what
    the agent has read (explorer.py), so a policy can learn each of its moves from the
    episode's history; `planner` is the optimal plan (planner.py), which walks straight to
    objects the agent has not seen. The process reward uses the planner either way."""

    def __post_init__(self) -> None:
        if self.mix is not None:
            if not self.mix or any(not w > 0 for w in self.mix.values()):
                raise ValueError("mix: expected presets with weights > 0, e.g. "
                                 "{short: 0.75, medium: 0.15, long: 0.1}")
            for name in Knobs.__dataclass_fields__:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: not with mix (each world takes its preset's "
                                     "knobs); drop one of them")
        knobs = self.knobs()
        if not 2 <= knobs.rooms <= MAX_ROOMS:
            raise ValueError(f"rooms: must be in 2..{MAX_ROOMS}")
        if not 0 <= knobs.locks <= min(MAX_LOCKS, knobs.rooms - 1):
            raise ValueError(f"locks: must be in 0..{MAX_LOCKS} and below rooms")
        if not 1 <= knobs.objects <= MAX_OBJECTS:
            raise ValueError(f"objects: must be in 1..{MAX_OBJECTS}")
        if not 0 <= knobs.distractors <= MAX_DISTRACTORS:
            raise ValueError(f"distractors: must be in 0..{MAX_DISTRACTORS}")
        if knobs.inventory_limit < 0:
            raise ValueError("inventory_limit: must be >= 0 (0 = no limit)")
        for name in ("num_train", "num_dev", "num_test"):
            if not 0 <= getattr(self, name) <= MAX_TASKS:
                raise ValueError(f"{name}: must be in 0..{MAX_TASKS}")
        if self.progress_reward < 0:
            raise ValueError("progress_reward: must be >= 0")
        if self.end_after_repeats < 0 or self.end_after_repeats == 1:
            raise ValueError("end_after_repeats: expected 0 (never) or a count >= 2")
        if not 0.0 <= self.demo_detours < 1.0:
            raise ValueError("demo_detours: expected a probability in [0, 1)")

    def presets(self) -> dict[str, float]:
        """The presets worlds are drawn from, with their weights (`horizon` alone: weight 1)."""
        if self.mix is None:
            return {self.horizon: 1.0}
        return {str(name): weight for name, weight in self.mix.items()}

    def knobs(self, horizon: str | None = None) -> Knobs:
        """The preset (`horizon`, default the `horizon` field) with every explicit knob
        applied."""
        base = HORIZONS[horizon or self.horizon]
        pick = {name: getattr(self, name) for name in Knobs.__dataclass_fields__}
        return Knobs(**{k: getattr(base, k) if v is None else v for k, v in pick.items()})

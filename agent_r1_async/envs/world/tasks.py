"""The world env's tasks: one generated world per task, each split from its own seed range.

- World i of a split is generated from seed `SPLIT_SEEDS[split] + i` (mixed with `seed`), so
  the splits never share a seed; a world whose layout hash (`Layout.digest`) appears in dev or
  test is skipped in train, and a hash already in a split is skipped there.
- Held-out compositions (with `held_out: true`, the default): train never uses the colors
  `HELD_OUT_COLORS` (no door, no key) and never asks for the objects `HELD_OUT_TARGETS`
  (they may lie about as distractors, so the words are known). Dev and test draw from every
  name; a task that uses a held-out color on a door or a held-out object as a goal is
  *novel* (metric `novel`), and the split `test_novel` holds exactly the novel test tasks:
  evaluating on it measures generalisation to new color/door and goal compositions.
- With `mix`, each world first draws its preset from the mix's weights (from the same seeded
  stream, so a world is still a function of its split, index and `seed`); its task's
  `meta["horizon"]` names the preset and `meta["turn_limit"]` is that preset's
  `SUGGESTED_MAX_TURNS`.
"""

from __future__ import annotations

import random

from agent_r1_async.envs.base import Task
from agent_r1_async.envs.world.args import SUGGESTED_MAX_TURNS, WorldArgs
from agent_r1_async.envs.world.layout import COLORS, OBJECTS, Layout, Palette, generate
from agent_r1_async.envs.world.state import describe, initial_state

SPLIT_SEEDS = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
"""First world seed of each split; a split's worlds take consecutive seeds from there."""
SPLITS = (*SPLIT_SEEDS, "test_novel")
HELD_OUT_COLORS = ("purple", "orange")
HELD_OUT_TARGETS = ("teapot", "flute", "basket")


def palette(split: str, held_out: bool) -> Palette:
    """The names a split's worlds may use."""
    if split != "train" or not held_out:
        return Palette()
    return Palette(colors=tuple(c for c in COLORS if c not in HELD_OUT_COLORS),
                   targets=tuple(o for o in OBJECTS if o not in HELD_OUT_TARGETS))


def is_novel(layout: Layout) -> bool:
    """The world has a held-out color on a door or a held-out object as a goal."""
    return (any(c in HELD_OUT_COLORS for c in layout.locks.values())
            or any(t in HELD_OUT_TARGETS for t in layout.targets))


def _things(names: list[str]) -> str:
    named = [f"the {n}" for n in names]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def instruction(layout: Layout) -> str:
    """The task as the agent reads it, with the start room's description."""
    start = layout.names[layout.start]
    if len(layout.targets) == 1:
        goal = f"Find the {layout.targets[0]} and bring it back to the {start}: drop it there."
    else:
        goal = f"Collect {_things(list(layout.targets))} and drop them in the {start}."
    if layout.inventory_limit:
        limit = layout.inventory_limit
        goal += (f" You can hold {limit} object{'s' if limit > 1 else ''} at a time; "
                 "keys go on your key ring.")
    return f"{goal}\n{describe(layout, initial_state(layout))}"


def world(args: WorldArgs, split: str, index: int) -> Layout:
    """World `index` of `split` (deterministic)."""
    return drawn_world(args, split, index)[1]


def drawn_world(args: WorldArgs, split: str, index: int) -> tuple[str, Layout]:
    """World `index` of `split` and the preset it was drawn from."""
    seed = SPLIT_SEEDS[split] + index
    rng = random.Random(f"world/{args.seed}/{seed}")
    horizon = args.horizon
    if args.mix is not None:
        names = list(args.mix)
        horizon = rng.choices(names, weights=[args.mix[n] for n in names])[0]
    return horizon, generate(rng, args.knobs(horizon), palette(split, args.held_out))


def _layouts(args: WorldArgs, split: str, size: int,
             skip: set[str]) -> list[tuple[int, str, Layout]]:
    out: list[tuple[int, str, Layout]] = []
    seen = set(skip)
    for index in range(20 * size + 100):
        if len(out) >= size:
            break
        horizon, layout = drawn_world(args, split, index)
        digest = layout.digest()
        if digest in seen:
            continue
        seen.add(digest)
        out.append((index, horizon, layout))
    return out


def make_tasks(args: WorldArgs, split: str) -> list[Task]:
    if split not in SPLITS:
        raise ValueError(f"world: unknown split {split!r} ({', '.join(SPLITS)})")
    if split == "test_novel":
        return [t for t in make_tasks(args, "test") if t.meta["novel"]]
    sizes = {"train": args.num_train, "dev": args.num_dev, "test": args.num_test}
    skip: set[str] = set()
    if split == "train":  # no dev or test world in train
        skip = {t.meta["hash"] for s in ("dev", "test") for t in make_tasks(args, s)}
    tasks = []
    for index, horizon, layout in _layouts(args, split, sizes[split], skip):
        meta = {"layout": layout, "seed": SPLIT_SEEDS[split] + index, "hash": layout.digest(),
                "novel": is_novel(layout), "horizon": horizon}
        if args.mix is not None:
            meta["turn_limit"] = SUGGESTED_MAX_TURNS[horizon]
        tasks.append(Task(f"world-{split}-{index}", instruction(layout), None, meta))
    return tasks

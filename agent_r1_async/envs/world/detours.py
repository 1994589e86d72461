"""Demonstrations that show a recovery: deliberate mistakes the world refuses, then the
demonstrator's own next action.

A warm start on flawless demonstrations never sees a refused action, so a policy that makes
one mistake stands in a context no demonstration looked like. Small models then repeat the
refused action until the turns run out (the world's dev transcripts: 35–53 repeats of one
refused move). Showing mistakes and their recoveries in the demonstrations, with the mistakes
kept out of the loss, is the data-side answer of imitation learning (DART: noise injected into
the demonstrator's rollouts so that they visit the states the learner will reach).

Here a mistake is an action the world refuses: it changes nothing, so the demonstrator's plan
stays valid and its next action is the recovery. Before each demonstrator action, with
probability `rate`, one mistake is drawn: a kind first (`go` half the time, `take` and
`unlock` a quarter each, falling back to a kind that has a refused action here), then one
refused action of that kind uniformly:
- `go` toward a direction with no exit, or through a locked door;
- `take` a goal object or a key that is not in this room;
- `unlock` a direction with no locked door, or a locked door whose key the agent lacks.
The draw uses a generator seeded by the task id, so a task's demonstration is the same in
every process and run.
"""

from __future__ import annotations

import random

from agent_r1_async.envs.world.layout import DIRECTIONS, Layout
from agent_r1_async.envs.world.state import Action, WorldState, act, initial_state

KIND_WEIGHTS = (("go", 0.5), ("take", 0.25), ("unlock", 0.25))
"""How a mistake's kind is drawn (the moves a policy gets wrong most are walks)."""


def refused_actions(layout: Layout, state: WorldState) -> dict[str, list[Action]]:
    """The actions of each mistake kind that the world refuses in `state`, in a fixed order."""
    out: dict[str, list[Action]] = {"go": [], "take": [], "unlock": []}
    for kind, args in (("go", DIRECTIONS), ("unlock", DIRECTIONS),
                       ("take", sorted({*layout.targets, *(i for i in layout.items
                                                            if layout.is_key(i))}))):
        for arg in args:
            if not act(layout, state.copy(), (kind, arg)).valid:
                out[kind].append((kind, arg))
    return out


def draw_mistake(layout: Layout, state: WorldState, rng: random.Random) -> Action | None:
    """One refused action (module docstring), or None when the world refuses nothing here."""
    refused = refused_actions(layout, state)
    kinds = [k for k, _ in KIND_WEIGHTS if refused[k]]
    if not kinds:
        return None
    weights = [w for k, w in KIND_WEIGHTS if refused[k]]
    kind = rng.choices(kinds, weights)[0]
    return rng.choice(refused[kind])


def with_detours(layout: Layout, actions: list[Action], rate: float,
                 seed: str) -> list[tuple[Action, bool]]:
    """`actions` (a demonstrator's, from the start) with mistakes inserted at `rate`:
    (action, trained) pairs, the mistakes untrained. Played against the world as it goes, so
    each mistake is refused where it stands."""
    rng = random.Random(seed)
    state = initial_state(layout)
    out: list[tuple[Action, bool]] = []
    for action in actions:
        if rate > 0 and rng.random() < rate:
            mistake = draw_mistake(layout, state, rng)
            if mistake is not None:
                out.append((mistake, False))
        act(layout, state, action)
        out.append((action, True))
    return out

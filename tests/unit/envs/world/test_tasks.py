"""World tasks: disjoint splits, held-out compositions, the presets' plan lengths, and a
random policy that never solves a world within three times the optimal budget."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from agent_r1_async.envs.world.args import HORIZONS, WorldArgs
from agent_r1_async.envs.world.layout import DIRECTIONS
from agent_r1_async.envs.world.planner import distance
from agent_r1_async.envs.world.state import act, initial_state, solved
from agent_r1_async.envs.world.tasks import (
    HELD_OUT_COLORS,
    HELD_OUT_TARGETS,
    SPLIT_SEEDS,
    is_novel,
    make_tasks,
    world,
)


def _args(**kw) -> WorldArgs:
    return WorldArgs(**{"num_train": 300, "num_dev": 60, "num_test": 120, **kw})


@pytest.mark.parametrize("horizon", ["short", "medium"])
def test_splits_are_disjoint_by_seed_range_and_by_layout_hash(horizon):
    args = _args(horizon=horizon)
    splits = {s: make_tasks(args, s) for s in ("train", "dev", "test")}
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [300, 60, 120]
    hashes = {s: {t.meta["hash"] for t in ts} for s, ts in splits.items()}
    assert all(len(hashes[s]) == len(splits[s]) for s in splits)  # no repeat inside a split
    assert not hashes["train"] & (hashes["dev"] | hashes["test"])
    assert not hashes["dev"] & hashes["test"]
    for s, ts in splits.items():
        lo = SPLIT_SEEDS[s]
        assert all(lo <= t.meta["seed"] < lo + 1_000_000 for t in ts)
        assert len({t.task_id for t in ts}) == len(ts)
    assert make_tasks(args, "dev")[5].prompt == splits["dev"][5].prompt  # deterministic


def test_train_skips_dev_and_test_layouts_and_repeats(monkeypatch):
    # Generated names make repeats rare, so make them: train seeds 0-9 give dev's worlds 0-9,
    # train seeds 10-14 all give one world. Train keeps neither a dev world nor a repeat.
    from agent_r1_async.envs.world import tasks as tasks_mod

    real = tasks_mod.drawn_world

    def fake(args, split, index):
        if split == "train" and index < 10:
            return real(args, "dev", index)
        if split == "train" and index < 15:
            return real(args, "train", 10)
        return real(args, split, index)

    monkeypatch.setattr(tasks_mod, "drawn_world", fake)
    args = _args(horizon="short", num_train=20)
    train = make_tasks(args, "train")
    assert [t.meta["seed"] for t in train] == [10, *range(15, 34)]
    dev = {t.meta["hash"] for t in make_tasks(args, "dev")}
    assert not dev & {t.meta["hash"] for t in train}


def test_train_never_uses_the_held_out_compositions_and_test_novel_holds_them():
    args = _args(horizon="long")
    for task in make_tasks(args, "train"):
        layout = task.meta["layout"]
        assert not any(c in layout.locks.values() for c in HELD_OUT_COLORS)
        assert not any(f"{c} key" in layout.items for c in HELD_OUT_COLORS)
        assert not any(t in layout.targets for t in HELD_OUT_TARGETS)
        assert not task.meta["novel"]
    test = make_tasks(args, "test")
    novel = make_tasks(args, "test_novel")
    assert 0 < len(novel) < len(test)
    assert [t.task_id for t in novel] == [t.task_id for t in test if is_novel(t.meta["layout"])]
    # without held_out, train draws from every name
    free = _args(horizon="long", held_out=False)
    assert any(t.meta["novel"] for t in make_tasks(free, "train"))


MEDIANS = {"short": (5, 7), "medium": (18, 22), "long": (38, 46), "xlong": (95, 115)}
"""The measured median optimal plan of each preset (docs/environments.md has the table over
500 worlds), as a range that 60 worlds must land in."""


@pytest.mark.parametrize("horizon", list(HORIZONS))
def test_preset_median_plan_lengths(horizon):
    args = _args(horizon=horizon)
    lengths = [distance(w, initial_state(w)) for w in (world(args, "dev", i) for i in range(60))]
    lo, hi = MEDIANS[horizon]
    assert lo <= statistics.median(lengths) <= hi


def test_a_random_policy_solves_nothing_with_three_times_the_optimal_budget():
    # Uniform over the six tools, arguments drawn from the four directions and the
    # world's item names: 0 of 8 worlds per preset within 3 x d(s_0) actions.
    for horizon in HORIZONS:
        args = _args(horizon=horizon)
        for i in range(8):
            layout = world(args, "dev", i)
            state = initial_state(layout)
            rng = random.Random(i)
            names = sorted(layout.items)
            for _ in range(3 * distance(layout, state)):
                tool = rng.choice(["go", "take", "drop", "unlock", "look", "inventory"])
                arg = (rng.choice(list(DIRECTIONS)) if tool in ("go", "unlock")
                       else rng.choice(names) if tool in ("take", "drop") else "")
                act(layout, state, (tool, arg))
                assert not solved(layout, state), (horizon, i)


def test_a_mix_draws_each_world_s_preset_by_its_weights_and_sets_its_turn_limit():
    from agent_r1_async.envs.world.args import SUGGESTED_MAX_TURNS
    from agent_r1_async.envs.world.layout import generate
    from agent_r1_async.envs.world.tasks import drawn_world, palette

    mix = {"short": 0.7, "medium": 0.2, "long": 0.1}
    args = _args(mix=mix, num_train=600)
    train = make_tasks(args, "train")
    counts = {h: sum(t.meta["horizon"] == h for t in train) for h in mix}
    # 600 draws: each share within 4 standard errors of its weight
    for h, w in mix.items():
        assert abs(counts[h] / 600 - w) < 4 * math.sqrt(w * (1 - w) / 600), counts
    for t in train[:50]:
        h = t.meta["horizon"]
        assert t.meta["turn_limit"] == SUGGESTED_MAX_TURNS[h]
        knobs, layout = HORIZONS[h], t.meta["layout"]
        assert (len(layout.names), len(layout.locks), len(layout.targets),
                layout.inventory_limit) == (knobs.rooms, knobs.locks, knobs.objects,
                                            knobs.inventory_limit)
    # deterministic; the preset comes first from the world's seeded stream
    assert [t.prompt for t in make_tasks(args, "dev")] == [t.prompt for t in
                                                          make_tasks(args, "dev")]
    h, layout = drawn_world(args, "train", 3)
    rng = random.Random(f"world/0/{SPLIT_SEEDS['train'] + 3}")
    assert rng.choices(list(mix), weights=list(mix.values()))[0] == h
    assert generate(rng, HORIZONS[h], palette("train", True)).digest() == layout.digest()


def test_without_a_mix_worlds_and_tasks_are_as_before():
    from agent_r1_async.envs.world.layout import generate
    from agent_r1_async.envs.world.tasks import palette

    args = _args(horizon="medium")
    for i in range(5):
        rng = random.Random(f"world/0/{SPLIT_SEEDS['dev'] + i}")
        assert world(args, "dev", i).digest() == generate(
            rng, HORIZONS["medium"], palette("dev", True)).digest()
    task = make_tasks(args, "dev")[0]
    assert task.meta["horizon"] == "medium" and "turn_limit" not in task.meta


@pytest.mark.parametrize(("kw", "message"), [
    ({"mix": {"short": 1.0}, "rooms": 6}, "rooms: not with mix"),
    ({"mix": {"short": 1.0, "long": 0.0}}, "mix: expected presets with weights > 0"),
    ({"mix": {}}, "mix: expected presets with weights > 0"),
])
def test_a_bad_mix_names_its_key(kw, message):
    with pytest.raises(ValueError, match=message):
        _args(**kw)

"""Splits are the package's seed ranges played in their own fold: no game is in two."""

from __future__ import annotations

import pytest

from agent_r1_async.envs.registry import parse_args, resolve
from agent_r1_async.envs.twx.game import GameId
from agent_r1_async.envs.twx.pool import GamePool
from agent_r1_async.envs.twx.splits import game_id, make_tasks


def _tasks(split: str, **args):
    return make_tasks(parse_args(resolve("textworld_express"), args), split)


def test_each_split_is_its_seed_range_in_its_own_fold():
    train, dev, test = (_tasks(s, game="cooking", num_locations=[1, 3]) for s in
                        ("train", "dev", "test"))
    assert [t.meta["seed"] for t in train] == list(range(0, 1000))
    assert [t.meta["seed"] for t in dev] == list(range(10_000, 10_200))
    assert [t.meta["seed"] for t in test] == list(range(20_000, 20_200))
    assert {t.meta["fold"] for t in train} == {"train"}
    assert {t.meta["fold"] for t in dev} == {"dev"} and {t.meta["fold"] for t in test} == {"test"}
    first = train[0]
    assert first.task_id == "twx-cooking-train-0"
    assert game_id(first) == GameId("cookingworld", "numLocations=3", 0, "train")


@pytest.mark.parametrize("game", ["coin", "cooking", "twc"])
def test_no_game_seed_and_fold_is_in_two_splits(game: str):
    keys = {s: {(t.meta["game"], t.meta["seed"], t.meta["fold"]) for t in _tasks(s, game=game)}
            for s in ("train", "dev", "test")}
    assert [len(k) for k in keys.values()] == [1000, 200, 200]  # no repeats inside a split
    assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"]
    assert not keys["dev"] & keys["test"]
    ids = [t.task_id for s in ("train", "dev", "test") for t in _tasks(s, game=game)]
    assert len(ids) == len(set(ids)) == 1400


def test_split_sizes_and_unknown_split():
    assert len(_tasks("dev", num_dev=7)) == 7
    with pytest.raises(ValueError, match=r"unknown split 'val' \(train, dev, test\)"):
        _tasks("val")


@pytest.mark.usefixtures("twx_ready")
def test_the_seed_ranges_are_the_packages_own():
    pool = GamePool(max_games=1, heap_mb=256)
    game = pool.acquire()
    try:
        game.start(GameId("coin", "numLocations=2", 0, "train"))
        for method, first in (("getSeedsTrain", 0), ("getSeedsDev", 10_000),
                              ("getSeedsTest", 20_000)):
            assert list(game._call(method)) == list(range(first, first + 1000))
    finally:
        pool.release(game)

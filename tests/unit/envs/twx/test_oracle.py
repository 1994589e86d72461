"""Gold paths: replayed to a win with full marks, refused commands dropped, cached per game."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.envs.twx import oracle
from agent_r1_async.envs.twx.game import GameId
from agent_r1_async.envs.twx.oracle import gold_path, winning_path
from agent_r1_async.envs.twx.pool import GamePool
from tests.unit.envs.twx.conftest import SMALL_COIN, SMALL_COOKING, make_spec

pytestmark = pytest.mark.usefixtures("twx_ready")

SMALL_TWC = {"game": "twc", "num_locations": 1, "num_items_to_put_away": [1, 2],
             "include_doors": False, "limit_inventory_size": False}


async def _play(spec, task, actions):
    env = spec.make()
    await env.reset(task)
    results = [await env.step(a) for a in actions]
    return results


@pytest.mark.parametrize("args", [SMALL_COIN, SMALL_COOKING, SMALL_TWC],
                         ids=["coin", "cooking", "twc"])
def test_the_oracle_wins_with_full_marks(args: dict):
    spec = make_spec(args)
    for task in [*spec.tasks("train")[:3], spec.tasks("dev")[0], spec.tasks("test")[0]]:
        actions = spec.oracle(task)
        results = asyncio.run(_play(spec, task, actions))
        end = results[-1]
        assert [r.done for r in results] == [False] * (len(actions) - 1) + [True]
        assert end.outcome_reward == 1.0 and not end.truncated
        # every process reward is a score delta (no penalty on a gold path): they sum to 1
        assert sum(r.reward for r in results) == pytest.approx(1.0, abs=1e-12)
        m = end.metrics
        assert (m["score"], m["success"], m["lost"], m["truncated"]) == (1.0, 1.0, 0.0, 0.0)
        assert m["steps"] == m["optimal_len"] == m["tool_calls"] == len(actions)
        assert m["invalid_commands"] == m["invalid_calls"] == 0.0


def test_commands_the_game_refuses_are_dropped_from_the_gold_path():
    pool = GamePool(max_games=1, heap_mb=256)
    game = pool.acquire()
    gid = GameId("cookingworld", "numLocations=5,numIngredients=3,numDistractorItems=3,"
                 "includeDoors=1,limitInventorySize=1", 2, "train")
    try:
        game.start(gid, gold=True)
        raw = game.gold_path()
        # the package's path opens the kitchen cupboard twice (commands 4 and 10) without
        # closing it between: the game refuses the second one
        assert len(raw) == 21 and [i for i, c in enumerate(raw)
                                   if c == "open kitchen cupboard"] == [4, 10]
        assert winning_path(game, gid) == (*raw[:10], *raw[11:])
    finally:
        pool.release(game)


def test_a_coin_walk_differs_between_draws_and_the_cache_keeps_one_per_game():
    pool = GamePool(max_games=2, heap_mb=256)
    gid = GameId("coin", "numLocations=7,numDistractorItems=0,includeDoors=0,"
                 "limitInventorySize=0", 2, "train")
    game = pool.acquire()
    try:
        draws = set()
        for _ in range(8):
            game.start(gid, gold=True)
            draws.add(tuple(game.gold_path()))
    finally:
        pool.release(game)
    assert len(draws) > 1  # the package's gold path of this game is a random walk
    first = gold_path(pool, gid, samples=1)
    assert all(gold_path(pool, gid, samples=1) is first for _ in range(3))
    spec = make_spec({**SMALL_COIN, "num_locations": 7})
    task = spec.tasks("train")[2]
    assert spec.oracle(task) == spec.oracle(task) == spec.oracle(task)


def test_the_shortest_of_the_draws_is_kept(monkeypatch):
    class Pool:  # no JVM: the drawn walks are scripted
        def acquire(self):
            return "game"

        def release(self, game):
            assert game == "game"

    walks = iter([("a", "b", "c", "d", "e"), ("a", "b", "c"), ("a", "b", "c", "d")])
    monkeypatch.setattr(oracle, "winning_path", lambda game, gid: next(walks))
    gid = GameId("coin", "numLocations=9", 123, "test")
    assert gold_path(Pool(), gid, samples=3) == ("a", "b", "c")
    assert gold_path(Pool(), gid, samples=3) == ("a", "b", "c")  # cached: no fourth draw

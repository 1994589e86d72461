"""`env.args` of textworld_express: what is refused (naming the key) and what tasks get."""

from __future__ import annotations

import pytest

from agent_r1_async.config import ConfigError
from agent_r1_async.envs.registry import parse_args, resolve
from agent_r1_async.envs.twx.args import TwxArgs
from agent_r1_async.envs.twx.splits import param_string, task_params


def _parse(args: dict) -> TwxArgs:
    return parse_args(resolve("textworld_express"), args)


@pytest.mark.parametrize(("args", "message"), [
    ({"bogus": 1}, "unknown config key `env.args.bogus`"),
    ({"numLocations": 4}, "unknown config key `env.args.numLocations`"),
    ({"game": "zork"}, "config key `env.args.game`: unknown game 'zork' (coin, cooking, twc)"),
    ({"game": "coin", "num_ingredients": 2},
     "config key `env.args.num_ingredients`: coin takes no num_ingredients (it takes "
     "num_locations, num_distractor_items, include_doors, limit_inventory_size)"),
    ({"game": "twc", "num_distractor_items": 1},
     "config key `env.args.num_distractor_items`: twc takes no num_distractor_items (it takes "
     "num_locations, num_items_to_put_away, include_doors, limit_inventory_size)"),
    ({"num_locations": 12}, "config key `env.args.num_locations`: 12 is out of range for coin "
                            "(1..11)"),
    ({"game": "twc", "num_locations": [1, 4]},
     "config key `env.args.num_locations`: 4 is out of range for twc (1..3)"),
    ({"num_locations": [7, 4]}, "config key `env.args.num_locations`: range [7, 4] is empty "
                                "(lo > hi)"),
    ({"game": "cooking", "num_ingredients": 0},
     "config key `env.args.num_ingredients`: 0 is out of range for cooking (1..5)"),
    ({"include_doors": 1}, "config key `env.args.include_doors`: Expected `bool | null`, got "
                           "`int`"),
    ({"num_train": 1001}, "config key `env.args.num_train`: must be in 1..1000 (the seeds of a "
                          "fold)"),
    ({"gold_samples": 0}, "config key `env.args.gold_samples`: must be >= 1"),
    ({"max_games": 0}, "config key `env.args.max_games`: must be >= 1"),
])
def test_bad_args_are_refused_naming_the_key(args: dict, message: str):
    with pytest.raises(ConfigError) as err:
        _parse(args)
    assert str(err.value) == message


def test_fixed_values_and_switches_become_the_package_parameter_string():
    args = _parse({"game": "cooking", "num_locations": 3, "num_ingredients": 2,
                   "include_doors": True, "limit_inventory_size": False})
    params = task_params(args, seed=7)
    assert params == {"numLocations": 3, "numIngredients": 2, "includeDoors": 1,
                      "limitInventorySize": 0}
    assert param_string(params) == ("numLocations=3,numIngredients=2,includeDoors=1,"
                                    "limitInventorySize=0")
    assert task_params(_parse({}), seed=7) == {}  # all unset: the package's defaults


def test_a_range_draws_per_seed_and_the_same_seed_always_gets_the_same_value():
    args = _parse({"num_locations": [4, 7]})
    # random.Random(f"{seed}/num_locations").randint(4, 7) for seeds 0..4
    assert [task_params(args, s)["numLocations"] for s in range(5)] == [6, 4, 6, 6, 4]
    drawn = [task_params(args, s)["numLocations"] for s in range(1000)]
    assert set(drawn) == {4, 5, 6, 7}
    assert drawn == [task_params(args, s)["numLocations"] for s in range(1000)]


def test_gold_draws_are_sampled_only_for_a_random_gold_walk():
    assert _parse({"game": "coin", "gold_samples": 5}).gold_draws == 5
    assert _parse({"game": "cooking", "gold_samples": 5}).gold_draws == 1
    assert _parse({"game": "twc"}).gold_draws == 1

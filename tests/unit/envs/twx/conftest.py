"""Fixtures of the textworld_express tests: the JVM is one per process (envs/twx/jvm.py), so
every test module here shares one."""

from __future__ import annotations

import pytest

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.registry import EnvSpec, get_env_spec
from tests.unit.envs.twx.needs import require_twx

SMALL_COIN = {"game": "coin", "num_locations": 4, "num_distractor_items": 0,
              "include_doors": False, "limit_inventory_size": False}
SMALL_COOKING = {"game": "cooking", "num_locations": 1, "num_ingredients": [1, 2],
                 "num_distractor_items": 0, "include_doors": False, "limit_inventory_size": False}


@pytest.fixture(scope="session")
def twx_ready() -> None:
    require_twx()


def make_spec(args: dict, max_turns: int = 60) -> EnvSpec:
    return get_env_spec(EnvConfig(name="textworld_express", max_turns=max_turns, args=args))

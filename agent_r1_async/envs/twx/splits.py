"""Tasks of a split: the package's seed range and object fold for that split.

The package sets aside 1000 seeds per fold (train 0-999, dev 10000-10999, test 20000-20999)
and, for Cooking and TWC, different objects per fold (`gameFold`: held-out ingredients and
items). A split here is the first `num_<split>` seeds of its range played in its own fold, so
no (game, seed, fold) is in two splits. A parameter given as a range draws its value per
task from the seed (the same seed always gets the same value).
"""

from __future__ import annotations

import random

from agent_r1_async.envs.base import Task
from agent_r1_async.envs.twx.args import TwxArgs
from agent_r1_async.envs.twx.game import GameId

FOLDS: dict[str, int] = {"train": 0, "dev": 10_000, "test": 20_000}
"""Split (= the package's fold) -> its first seed."""


def split_seeds(args: TwxArgs, split: str) -> range:
    if split not in FOLDS:
        raise ValueError(f"textworld_express: unknown split {split!r} ({', '.join(FOLDS)})")
    first = FOLDS[split]
    return range(first, first + getattr(args, f"num_{split}"))


def task_params(args: TwxArgs, seed: int) -> dict[str, int]:
    """The package's parameters (name -> value) of the task with `seed`; unset ones are left
    to the package's defaults."""
    out: dict[str, int] = {}
    for key, value in args.set_params().items():
        param = args.spec.param(key)
        assert param is not None  # TwxArgs refused it otherwise
        if isinstance(value, tuple):
            value = random.Random(f"{seed}/{key}").randint(*value)
        out[param.twx_name] = int(value)
    return out


def param_string(params: dict[str, int]) -> str:
    """The package's parameter string ("numLocations=5,includeDoors=0")."""
    return ",".join(f"{k}={v}" for k, v in params.items())


def make_tasks(args: TwxArgs, split: str) -> list[Task]:
    tasks: list[Task] = []
    for seed in split_seeds(args, split):
        params = param_string(task_params(args, seed))
        meta = {"game": args.game, "twx_game": args.spec.twx_name, "params": params,
                "seed": seed, "fold": split}
        prompt = f"{args.game} seed {seed} ({split} fold{', ' + params if params else ''})"
        tasks.append(Task(f"twx-{args.game}-{split}-{seed}", prompt, None, meta))
    return tasks


def game_id(task: Task) -> GameId:
    """The game a task names (its `meta`)."""
    m = task.meta
    return GameId(str(m["twx_game"]), str(m["params"]), int(m["seed"]), str(m["fold"]))

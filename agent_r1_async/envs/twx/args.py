"""`env.args` of the `textworld_express` env, validated when the config is read.

A generation parameter is an int, an inclusive range `[lo, hi]` (each task draws its value
from the range, fixed by its seed: `num_locations: [4, 7]` mixes 4- to 7-room games), a bool
for the 0/1 switches, or unset (the package's default for that game). A parameter the chosen
game does not take is refused, naming the key and the ones it takes.
"""

from __future__ import annotations

import msgspec

from agent_r1_async.envs.twx.games import GAMES, Game, Param

SEEDS_PER_FOLD = 1000
"""Seeds the package sets aside per fold (train 0-999, dev 10000-10999, test 20000-20999)."""

Range = int | tuple[int, int]


class TwxArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    game: str = "coin"
    """coin (CoinCollector), cooking (CookingWorld) or twc (TextWorld Commonsense)."""
    num_locations: Range | None = None
    """Rooms (coin, cooking: 1-11; twc: 1-3)."""
    num_distractor_items: Range | None = None
    """Objects unrelated to the task (coin, cooking: 0-10)."""
    num_ingredients: Range | None = None
    """Ingredients of the recipe (cooking: 1-5)."""
    num_items_to_put_away: Range | None = None
    """Misplaced items (twc: 1-4)."""
    include_doors: bool | None = None
    """Rooms are joined by doors that must be opened (`open door to <direction>`)."""
    limit_inventory_size: bool | None = None
    """The agent carries only a few items at once."""
    num_train: int = SEEDS_PER_FOLD
    """Games in the train split, one per seed of the package's train fold (1 to 1000)."""
    num_dev: int = 200
    """Games in the dev split, one per seed of the package's dev fold (1 to 1000)."""
    num_test: int = 200
    """Games in the test split, one per seed of the package's test fold (1 to 1000)."""
    show_valid_actions: bool = False
    """Append the game's list of valid commands to every observation."""
    score_weight: float = 1.0
    """Process reward per point of the game's score (0 -> 1 over a won game): each step is
    paid its score delta times this."""
    success_reward: float = 1.0
    """Outcome reward of a won game (a lost or unfinished one: 0)."""
    invalid_command_penalty: float = -0.05
    """Process reward of a step whose command the game does not understand."""
    invalid_call_penalty: float = -0.1
    """Process reward of a step without exactly one well-formed `act` call."""
    gold_samples: int = 16
    """Games with a random gold walk (coin): draws of it per task, the shortest is the oracle."""
    max_games: int = 256
    """Games in play at once in one process (one per episode in flight)."""
    jvm_heap_mb: int = 256
    """Java heap of the process's one JVM (256 games of 7 rooms use under 180 MB of RSS)."""

    def __post_init__(self) -> None:
        game = GAMES.get(self.game)
        if game is None:
            raise ValueError(f"game: unknown game {self.game!r} ({', '.join(GAMES)})")
        for key in ("num_train", "num_dev", "num_test"):
            if not 1 <= getattr(self, key) <= SEEDS_PER_FOLD:
                raise ValueError(f"{key}: must be in 1..{SEEDS_PER_FOLD} (the seeds of a fold)")
        if self.gold_samples < 1:
            raise ValueError("gold_samples: must be >= 1")
        if self.max_games < 1:
            raise ValueError("max_games: must be >= 1")
        if self.jvm_heap_mb < 64:
            raise ValueError("jvm_heap_mb: must be >= 64")
        for key, value in self.set_params().items():
            _check_param(game, key, value)

    def set_params(self) -> dict[str, Range | bool]:
        """The generation parameters given (key -> value), unset ones left out."""
        values = {
            "num_locations": self.num_locations,
            "num_distractor_items": self.num_distractor_items,
            "num_ingredients": self.num_ingredients,
            "num_items_to_put_away": self.num_items_to_put_away,
            "include_doors": self.include_doors,
            "limit_inventory_size": self.limit_inventory_size,
        }
        return {k: v for k, v in values.items() if v is not None}

    @property
    def spec(self) -> Game:
        return GAMES[self.game]

    @property
    def gold_draws(self) -> int:
        """Gold paths drawn per task: `gold_samples` for a random gold walk, else one."""
        return self.gold_samples if self.spec.random_gold else 1


def _check_param(game: Game, key: str, value: Range | bool) -> None:
    param = game.param(key)
    if param is None:
        takes = ", ".join(p.key for p in game.params)
        raise ValueError(f"{key}: {game.name} takes no {key} (it takes {takes})")
    if isinstance(value, bool):  # a switch (msgspec typed it)
        return
    lo, hi = (value, value) if isinstance(value, int) else value
    if lo > hi:
        raise ValueError(f"{key}: range [{lo}, {hi}] is empty (lo > hi)")
    _in_range(param, game, lo)
    _in_range(param, game, hi)


def _in_range(param: Param, game: Game, value: int) -> None:
    if not param.lo <= value <= param.hi:
        raise ValueError(
            f"{param.key}: {value} is out of range for {game.name} ({param.lo}..{param.hi})")

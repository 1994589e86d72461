"""The TextWorldExpress games this env offers, and the generation parameters each one takes.

Each game lists its parameters by their `env.args` name (snake_case) with the package's own
name (camelCase, as its `load(gameName, paramStr)` reads them) and the range the package
accepts (textworld-express 1.1.0; checked against its JVM in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One generation parameter: its `env.args` key, the package's name and its range."""

    key: str
    twx_name: str
    lo: int
    hi: int
    flag: bool = False
    """A 0/1 switch (given as a bool in `env.args`)."""


@dataclass(frozen=True)
class Game:
    """One game of the package."""

    name: str
    """The `env.args.game` value."""
    twx_name: str
    """The package's game name (`gameName`)."""
    params: tuple[Param, ...]
    commands: str
    """The command forms the system prompt lists."""
    random_gold: bool = False
    """The package's gold path is a random walk (different on every call for one game)."""

    def param(self, key: str) -> Param | None:
        return next((p for p in self.params if p.key == key), None)


_ROOMS = Param("num_locations", "numLocations", 1, 11)
_DISTRACTORS = Param("num_distractor_items", "numDistractorItems", 0, 10)
_DOORS = Param("include_doors", "includeDoors", 0, 1, flag=True)
_INVENTORY = Param("limit_inventory_size", "limitInventorySize", 0, 1, flag=True)
_MOVES = "look around, inventory, move <direction>, open door to <direction>"

GAMES: dict[str, Game] = {
    "coin": Game(
        "coin", "coin", (_ROOMS, _DISTRACTORS, _DOORS, _INVENTORY),
        f"{_MOVES}, take coin", random_gold=True,
    ),
    "cooking": Game(
        "cooking", "cookingworld",
        (_ROOMS, Param("num_ingredients", "numIngredients", 1, 5), _DISTRACTORS, _DOORS,
         _INVENTORY),
        f"{_MOVES}, examine <thing>, open <container>, close <container>, take <thing>, "
        "put <thing> in <container>, read cookbook, slice <food>, dice <food>, chop <food>, "
        "cook <food> in <appliance>, prepare meal, eat meal",
    ),
    "twc": Game(
        "twc", "twc",
        (Param("num_locations", "numLocations", 1, 3),
         Param("num_items_to_put_away", "numItemsToPutAway", 1, 4), _DOORS, _INVENTORY),
        f"{_MOVES}, examine <thing>, open <container>, close <container>, take <thing>, "
        "put <thing> in <container>",
    ),
}
"""`env.args.game` -> game. CoinCollector: find the coin and take it. Cooking: read the
cookbook, gather and process the ingredients, prepare and eat the meal (a point per step of
the recipe). TWC (TextWorld Commonsense): put each misplaced item where it belongs."""

PARAM_KEYS: tuple[str, ...] = tuple(dict.fromkeys(p.key for g in GAMES.values() for p in g.params))
"""Every parameter key some game takes (the `env.args` fields)."""

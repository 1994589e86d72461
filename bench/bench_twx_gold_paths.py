"""TextWorldExpress's gold paths against the shortest route: what a CoinCollector demonstration
and `optimal_len` hold.

    .venv/bin/python -m bench.bench_twx_gold_paths --config configs/twx_coin.yaml --games 200

For the first `--games` games of a split (the config's `textworld_express` env and arguments),
the oracle's gold path (envs/twx/oracle.py: for CoinCollector the shortest of
`env.args.gold_samples` of the package's random walks, refused commands dropped, replayed to a
win) against a breadth-first search's shortest winning command sequence (`shortest_route`: every
valid command but `look around` and `inventory`, each prefix replayed from the game's start,
states told apart by their observation, commands tried in sorted order). Printed: the gold
path's length minus the shortest route's, per game count; the gold paths' first commands; the
same comparison for a second oracle draw in the same process with the cache cleared, which
shows how far two processes' demonstrations of one game differ; and the seconds of each.
Lengths depend on the package's draws, not on the machine. Seconds to run.
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent_r1_async.config import load_config
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.twx import oracle
from agent_r1_async.envs.twx.game import Frame, GameId
from agent_r1_async.envs.twx.splits import game_id
from bench.stats import load_line, machine_line, utc_date

PASSIVE = frozenset({"look around", "inventory"})
"""Commands that change no state: the search never tries them."""


class Game(Protocol):
    def start(self, gid: GameId, gold: bool = False) -> Frame: ...
    def step(self, command: str) -> Frame: ...


def shortest_route(game: Game, gid: GameId, max_expansions: int = 10_000) -> tuple[str, ...]:
    """The shortest winning command sequence of `gid` by breadth-first search (module
    docstring); ValueError when none is found within `max_expansions` commands tried."""
    first = game.start(gid)
    seen = {first.observation}
    frontier = collections.deque([((), first)])
    tried = 0
    while frontier:
        path, frame = frontier.popleft()
        for command in frame.valid_actions:
            if command in PASSIVE:
                continue
            tried += 1
            if tried > max_expansions:
                raise ValueError(f"{gid}: no winning route within {max_expansions} commands")
            game.start(gid)
            for c in path:
                game.step(c)
            after = game.step(command)
            if after.success:
                return (*path, command)
            if after.failure or after.refused or after.observation in seen:
                continue
            seen.add(after.observation)
            frontier.append(((*path, command), after))
    raise ValueError(f"{gid}: no winning route")


def histogram(diffs: Sequence[int]) -> str:
    return ", ".join(f"{d:+d}: {n}" for d, n in sorted(collections.Counter(diffs).items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=Path("configs/twx_coin.yaml"))
    ap.add_argument("--split", default="train")
    ap.add_argument("--games", type=int, default=200)
    args = ap.parse_args()
    cfg = load_config(args.config)
    spec = get_env_spec(cfg.env)
    samples = spec.args.gold_draws
    gids = [game_id(t) for t in spec.tasks(args.split)[:args.games]]
    print(f"# {utc_date()}; {load_line()}; {machine_line()}")
    print(f"# {args.config}: {args.split} games 1-{len(gids)}, gold = shortest of {samples} "
          "draws of the package's gold path")
    game = spec.definition.pool.acquire()
    t0 = time.perf_counter()
    routes = [shortest_route(game, g) for g in gids]
    route_s = time.perf_counter() - t0
    draws: list[list[tuple[str, ...]]] = []
    draw_s: list[float] = []
    for _ in range(2):
        oracle.clear_cache()
        t0 = time.perf_counter()
        draws.append([oracle.gold_path(spec.definition.pool, g, samples) for g in gids])
        draw_s.append(time.perf_counter() - t0)
    spec.definition.pool.release(game)
    lengths = [len(r) for r in routes]
    print(f"shortest route: median {sorted(lengths)[len(lengths) // 2]}, max {max(lengths)} "
          f"commands; {route_s:.1f} s")
    for i, paths in enumerate(draws, 1):
        print(f"gold draw {i} ({draw_s[i - 1]:.1f} s): gold − shortest route, games per "
              f"difference: {histogram([len(p) - len(r) for p, r in zip(paths, routes, strict=True)])}")
        first = collections.Counter(p[0] for p in paths)
        print(f"  first commands: {dict(first.most_common())}")
        same = sum(p == r or (p[:1] == ("look around",) and p[1:] == r)
                   for p, r in zip(paths, routes, strict=True))
        print(f"  the shortest route after an optional first look: {same} of {len(gids)}")
    agree = sum(a == b for a, b in zip(*draws, strict=True))
    print(f"draws 1 and 2 give the same path for {agree} of {len(gids)} games; lengths "
          f"differ for {sum(len(a) != len(b) for a, b in zip(*draws, strict=True))}")


if __name__ == "__main__":
    main()

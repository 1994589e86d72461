"""Gold paths: the package's `getGoldActionSequence()`, cleaned, checked and cached per game.

- A gold path sometimes holds a command the game refuses (e.g. opening a cupboard that is
  already open); refused commands change nothing, so they are dropped.
- Each path is replayed on a fresh game before it is kept: it must win.
- CoinCollector's gold path is a random exploration walk, different on every call (for one
  7-room game: 21, 3, 11 and 21 commands). For such games `samples` walks are drawn and the
  shortest winning one is kept (over 200 games of 4-7 rooms, 16 draws bring the median from
  5 to 3 commands and the maximum from 27 to 7). Other games' gold paths are deterministic:
  one draw.
- Cached per (game, parameters, seed, fold, samples) for the life of the process, so every
  call in a process returns the same path for a game (another process may draw another
  walk for a CoinCollector game).
"""

from __future__ import annotations

import threading

from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.twx.game import GameId, TwxGame
from agent_r1_async.envs.twx.pool import GamePool

_lock = threading.Lock()
_cache: dict[tuple[GameId, int], tuple[str, ...]] = {}


def gold_path(pool: GamePool, gid: GameId, samples: int = 1) -> tuple[str, ...]:
    """The winning command sequence of game `gid` (the shortest of `samples` draws)."""
    key = (gid, samples)
    with _lock:
        if key in _cache:
            return _cache[key]
    game = pool.acquire()
    try:
        best: tuple[str, ...] | None = None
        for _ in range(samples):
            path = winning_path(game, gid)
            if best is None or len(path) < len(best):
                best = path
    finally:
        pool.release(game)
    assert best is not None
    with _lock:
        return _cache.setdefault(key, best)


def winning_path(game: TwxGame, gid: GameId) -> tuple[str, ...]:
    """One drawn gold path of `gid` without its refused commands, replayed to a win."""
    game.start(gid, gold=True)
    drawn = game.gold_path()
    game.start(gid)
    kept: list[str] = []
    won = False
    for command in drawn:
        frame = game.step(command)
        if not frame.refused:
            kept.append(command)
        if frame.success or frame.failure:
            won = frame.success
            break
    if not won:
        raise EnvError(f"textworld_express: the gold path of {gid.twx_game} seed {gid.seed} "
                       f"({gid.fold}, {gid.params}) does not win: {drawn}")
    return tuple(kept)


def clear_cache() -> None:
    """Forget every cached path (tests)."""
    with _lock:
        _cache.clear()

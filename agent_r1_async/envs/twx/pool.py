"""The game objects of one env definition: one per episode in play, reused, bounded.

An episode leases a game object at reset and gives it back when it ends (or when the episode
object is collected: an episode cut by a timeout or a stop never says it ended). Game objects
of the process's JVM are kept for the next episode; at most `max_games` are leased at once.
A reset past that bound fails its episode with a line naming `env.args.max_games` (the bound
must cover the episodes in flight per process: `actors.groups_in_flight` x
`algorithm.group_size`). Thread-safe: resets and steps run on worker threads.
"""

from __future__ import annotations

import threading

from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.twx.game import TwxGame
from agent_r1_async.envs.twx.jvm import shared_jvm


class GamePool:
    def __init__(self, max_games: int, heap_mb: int) -> None:
        self.max_games = max_games
        self.heap_mb = heap_mb
        self._lock = threading.Lock()
        self._idle: list[TwxGame] = []
        self.leased = 0

    def acquire(self) -> TwxGame:
        """A game object for one episode (the JVM is launched on first use)."""
        with self._lock:
            if self.leased >= self.max_games:
                raise EnvError(
                    f"textworld_express: {self.max_games} games are in play in this process "
                    "(env.args.max_games); raise it to cover actors.groups_in_flight x "
                    "algorithm.group_size")
            self.leased += 1
        try:
            jvm = shared_jvm(self.heap_mb)
            with self._lock:
                while self._idle:
                    game = self._idle.pop()
                    if game.generation == jvm.generation:
                        return game
            return TwxGame(jvm)
        except BaseException:
            with self._lock:
                self.leased -= 1
            raise

    def release(self, game: TwxGame) -> None:
        """Give `game` back (once per `acquire`)."""
        with self._lock:
            self.leased -= 1
            if game.jvm.alive() and len(self._idle) < self.max_games:
                self._idle.append(game)

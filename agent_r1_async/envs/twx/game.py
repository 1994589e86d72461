"""One game object inside the JVM, driven through py4j: start a game, step it, read its gold path.

The JVM's answers (JSON) become `Frame`s. A call the JVM fails (a generation error, the JVM
gone) raises `EnvError` with one line: the episode ends as env_error, the actor goes on.
Each object serializes its own calls with a lock; different objects run in parallel (the
package keeps no shared mutable state between them).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.twx.jvm import Jvm

REFUSED_PREFIX = "Unknown action"
"""How the game answers a command its parser does not understand (the state is unchanged)."""


@dataclass(frozen=True)
class GameId:
    """What fixes one game: the package's game name, parameters, seed and fold."""

    twx_game: str
    params: str
    """The package's parameter string, e.g. "numLocations=5,includeDoors=0"."""
    seed: int
    fold: str
    """train, dev or test: the package's object split (`gameFold`)."""


@dataclass(frozen=True)
class Frame:
    """The game after a start or a step."""

    observation: str
    score: float
    """Normalized: 0 at the start, 1 when won."""
    success: bool
    failure: bool
    valid_actions: tuple[str, ...]
    refused: bool = False
    """The command was not understood (nothing happened)."""


class TwxGame:
    """One `PythonInterface` object of the JVM `jvm`."""

    def __init__(self, jvm: Jvm) -> None:
        self.jvm = jvm
        self.generation = jvm.generation
        self.lock = threading.Lock()
        self._obj = jvm.new_game()
        self._loaded: tuple[str, str] | None = None

    def start(self, gid: GameId, gold: bool = False) -> Frame:
        """A new game `gid` (its gold path is generated too when `gold`)."""
        with self.lock:
            if self._loaded != (gid.twx_game, gid.params):
                msg = self._call("load", gid.twx_game, gid.params)
                if msg:
                    self._loaded = None
                    raise EnvError(f"textworld_express: the game refused {gid.params!r}: "
                                   f"{str(msg).strip()}")
                self._loaded = (gid.twx_game, gid.params)
            raw = self._call("generateNewGameJSON", gid.seed, gid.fold, gold)
        return _frame(raw)

    def step(self, command: str) -> Frame:
        with self.lock:
            raw = self._call("stepJSON", command)
        return _frame(raw, command)

    def task_description(self) -> str:
        with self.lock:
            return str(self._call("getTaskDescription")).strip()

    def gold_path(self) -> list[str]:
        """The gold commands of the game last started with `gold=True`."""
        with self.lock:
            return [str(c) for c in self._call("getGoldActionSequence")]

    def _call(self, method: str, *args: Any) -> Any:
        from py4j.protocol import Py4JError, Py4JJavaError

        try:
            return getattr(self._obj, method)(*args)
        except Py4JJavaError as e:
            text = str(e.java_exception).strip().splitlines()
            raise EnvError(f"textworld_express: {method} failed in the JVM: "
                           f"{text[0] if text else e}") from None
        except Py4JError as e:
            why = self.jvm.failure() or f"{type(e).__name__}: {str(e).strip()[:200]}"
            raise EnvError(f"textworld_express: {method} failed: {why}") from None


def _frame(raw: str, command: str | None = None) -> Frame:
    data = json.loads(raw)
    observation = str(data.get("observation", "")).strip()
    return Frame(
        observation=observation,
        score=float(data.get("score", 0.0)),
        success=bool(data.get("tasksuccess", False)),
        failure=bool(data.get("taskfailure", False)),
        valid_actions=tuple(sorted(str(a) for a in data.get("validActions", []))),
        refused=command is not None and observation.startswith(REFUSED_PREFIX),
    )

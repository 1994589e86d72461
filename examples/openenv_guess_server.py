"""A small OpenEnv server (written with openenv-core's server API): guess the number.

    python examples/openenv_guess_server.py --port 8000 [--max-sessions 64]

The `openenv` env starts it itself from configs/openenv_example.yaml. Each WebSocket session
(`/ws`) gets its own `GuessEnvironment` (`SUPPORTS_CONCURRENT_SESSIONS`; at most
`--max-sessions` at once, default 64: a GRPO group of 8 concurrent episodes needs 8).

The game: `reset(seed)` picks a secret whole number from 1 to 16 (the same one for the same
seed); the agent has 5 guesses and is told "higher" or "lower" after each. Binary search
always wins, so the oracle (`oracle(reset_kwargs)`) plays it. Rewards per step:

- the secret: 1.0, and the episode ends (the outcome);
- a number still possible after the feedback so far (progress): +0.1;
- a number the feedback already ruled out, or no number at all: -0.1;
- the fifth wrong guess: 0.0, and the episode ends.

The game itself (`Game`, `secret_for`, `oracle`) needs nothing but the standard library, so
the oracle imports cheaply in every actor; openenv-core is imported only to serve.
"""

from __future__ import annotations

import argparse
import random
import re
from dataclasses import dataclass, field
from typing import Any

LOW, HIGH, MAX_GUESSES = 1, 16, 5
SOLVED, PROGRESS, WASTED, LOST = 1.0, 0.1, -0.1, 0.0
_NUMBER = re.compile(r"-?\d+")


def secret_for(seed: int | None) -> int:
    """The secret number of a seed (a random one without a seed)."""
    return random.Random(seed).randint(LOW, HIGH)


def oracle(reset_kwargs: dict[str, Any]) -> list[str]:
    """The binary search's guesses for the task reset with `reset_kwargs`: it always wins
    within `MAX_GUESSES`."""
    secret, lo, hi = secret_for(reset_kwargs.get("seed")), LOW, HIGH
    guesses: list[str] = []
    while True:
        mid = (lo + hi) // 2
        guesses.append(str(mid))
        if mid == secret:
            return guesses
        lo, hi = (mid + 1, hi) if mid < secret else (lo, mid - 1)


@dataclass
class Game:
    """One game: the secret, the range still possible, the guesses left."""

    secret: int
    low: int = LOW
    high: int = HIGH
    left: int = MAX_GUESSES
    solved: bool = False
    log: list[int] = field(default_factory=list)

    def intro(self) -> str:
        return (f"I am thinking of a whole number from {LOW} to {HIGH}. Guess it: answer with "
                f"one number. You have {MAX_GUESSES} guesses; after each I say higher or lower.")

    def play(self, text: str) -> tuple[str, float, bool]:
        """(what the agent reads, reward, done) for one action."""
        if self.left <= 0 or self.solved:
            return "The game is over.", 0.0, True
        self.left -= 1
        m = _NUMBER.search(text)
        if m is None:
            reply, reward = f"Say one number from {self.low} to {self.high}.", WASTED
        else:
            guess = int(m.group())
            self.log.append(guess)
            if guess == self.secret:
                self.solved = True
                return f"Correct! It is {guess}.", SOLVED, True
            reward = PROGRESS if self.low <= guess <= self.high else WASTED
            if guess < self.secret:
                self.low = max(self.low, guess + 1)
                reply = f"Higher than {guess}."
            else:
                self.high = min(self.high, guess - 1)
                reply = f"Lower than {guess}."
        if self.left == 0:
            return f"{reply} No guesses left: it was {self.secret}.", LOST, True
        return f"{reply} {self.left} guess{'es' if self.left > 1 else ''} left.", reward, False


def build_app(max_sessions: int = 64) -> Any:
    """The FastAPI app serving `GuessEnvironment` (HTTP /reset /step /state /schema /health,
    WebSocket /ws)."""
    from openenv.core.env_server import Action, Environment, Observation, State, create_app
    from pydantic import Field

    class GuessAction(Action):
        message: str = Field(..., description="The agent's reply; its first number is the guess")

    class GuessObservation(Observation):
        message: str = Field("", description="What the agent reads")
        low: int = Field(LOW, description="The smallest number still possible")
        high: int = Field(HIGH, description="The largest number still possible")
        guesses_left: int = Field(MAX_GUESSES, description="Guesses left")
        solved: bool = Field(False, description="The secret was guessed")

    class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
        """Guess the number: one game per reset; one instance per WebSocket session."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.game = Game(secret_for(None), left=0)
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  **kwargs: Any) -> GuessObservation:
            self.game = Game(secret_for(seed))
            self._state = State(episode_id=episode_id, step_count=0)
            return self._observe(self.game.intro(), None, False)

        def step(self, action: GuessAction, timeout_s: float | None = None,
                 **kwargs: Any) -> GuessObservation:
            self._state.step_count += 1
            text, reward, done = self.game.play(action.message)
            return self._observe(text, reward, done)

        @property
        def state(self) -> State:
            return self._state

        def _observe(self, text: str, reward: float | None, done: bool) -> GuessObservation:
            g = self.game
            return GuessObservation(message=text, low=g.low, high=g.high, guesses_left=g.left,
                                    solved=g.solved, reward=reward, done=done)

    return create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess",
                      max_concurrent_envs=max_sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=64,
                        help="max_concurrent_envs: WebSocket sessions served at once")
    opts = parser.parse_args()
    import uvicorn

    uvicorn.run(build_app(opts.max_sessions), host=opts.host, port=opts.port,
                log_level="warning")


if __name__ == "__main__":
    main()

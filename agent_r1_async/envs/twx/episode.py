"""One episode of a TextWorldExpress game (implements the `Env` protocol).

reset: lease a game object, start the task's game, and open with the system prompt, the
game's task description and its first observation (and the `act` tool's schema). The start
runs on a thread (`asyncio.to_thread`): the first one in a process launches the JVM and the
first of each game computes its gold path, which can take a second on a busy machine.

step: read one command out of the action (text.py), send it to the game (under a
millisecond: inline), answer with the game's observation in a `<tool_response>` block as a
user message (the layout every built-in env uses). Rewards of the step, summed:
- the game's score delta x `score_weight` (Cooking scores each step of the recipe, the
  others score 0 -> 1 at the win; deltas sum to the final score);
- `invalid_command_penalty` when the game did not understand the command;
- `invalid_call_penalty` when the action has no well-formed `act` call (nothing is sent;
  the episode goes on) or more than one (only the first runs).
The episode ends when the game is won (outcome `success_reward`), lost (a Cooking meal
ruined: outcome 0) or after `env.max_turns` actions (truncated, outcome 0).

Metrics, on every step (so an episode cut short has them too): `steps` (actions so far),
`optimal_len` (commands of the task's gold path, oracle.py), `score`, `success`,
`tool_calls` (commands sent), `invalid_commands`, `invalid_calls`; at the end also `lost`
and `truncated`.
"""

from __future__ import annotations

import asyncio
import weakref

from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task
from agent_r1_async.envs.twx import text
from agent_r1_async.envs.twx.args import TwxArgs
from agent_r1_async.envs.twx.game import Frame, GameId, TwxGame
from agent_r1_async.envs.twx.oracle import gold_path
from agent_r1_async.envs.twx.pool import GamePool
from agent_r1_async.envs.twx.splits import game_id


class TwxEpisode:
    """One episode: a leased game object, the score so far and the episode's counters."""

    def __init__(self, args: TwxArgs, pool: GamePool, max_turns: int) -> None:
        self.args, self.pool, self.max_turns = args, pool, max_turns
        self.game: TwxGame | None = None
        self._release: weakref.finalize | None = None
        self.done = True
        self.turn = self.tool_calls = self.invalid_commands = self.invalid_calls = 0
        self.score = 0.0
        self.optimal_len = 0

    async def reset(self, task: Task) -> Observation:
        self._give_back()
        try:
            gid = game_id(task)
        except (KeyError, TypeError, ValueError) as e:
            raise EnvError(f"textworld_express: task {task.task_id!r} names no game "
                           f"(meta {e!r})") from None
        frame, description = await asyncio.to_thread(self._start, gid)
        self.done = False
        self.turn = self.tool_calls = self.invalid_commands = self.invalid_calls = 0
        self.score = frame.score
        first = f"{description}\n\n{self._observation(frame)}"
        return Observation(
            [{"role": "system", "content": text.system_prompt(self.args.spec)},
             {"role": "user", "content": first}],
            tools=[text.TOOL_SCHEMA],
        )

    async def step(self, action: str) -> StepResult:
        if self.done or self.game is None:
            raise EnvError("step() called before reset() or after the episode ended")
        self.turn += 1
        read = text.read_command(action)
        reward = 0.0
        if read.error:
            self.invalid_calls += 1
            reward += self.args.invalid_call_penalty
        answer = read.error
        frame: Frame | None = None
        if read.command is not None:
            frame = self.game.step(read.command)
            self.tool_calls += 1
            reward += self.args.score_weight * (frame.score - self.score)
            self.score = frame.score
            if frame.refused:
                self.invalid_commands += 1
                reward += self.args.invalid_command_penalty
            answer = self._observation(frame) + (f"\n{read.error}" if read.error else "")
        if frame is not None and (frame.success or frame.failure):
            return self._finish(reward, frame.success, truncated=False, calls=read.calls)
        if self.turn >= self.max_turns:
            return self._finish(reward, False, truncated=True, calls=read.calls)
        message = {"role": "user", "content": f"<tool_response>\n{answer}\n</tool_response>"}
        return StepResult(Observation([message]), reward, False, num_tool_calls=read.calls,
                          metrics=self._metrics(success=False))

    # -- helpers ------------------------------------------------------------------------

    def _start(self, gid: GameId) -> tuple[Frame, str]:
        self.optimal_len = len(gold_path(self.pool, gid, self.args.gold_draws))
        game = self.pool.acquire()
        self._release = weakref.finalize(self, self.pool.release, game)
        self.game = game
        return game.start(gid), game.task_description()

    def _observation(self, frame: Frame) -> str:
        valid = frame.valid_actions if self.args.show_valid_actions else None
        return text.observation(frame.observation, valid)

    def _metrics(self, success: bool) -> dict[str, float]:
        return {
            "steps": float(self.turn),
            "optimal_len": float(self.optimal_len),
            "score": self.score,
            "success": float(success),
            "tool_calls": float(self.tool_calls),
            "invalid_commands": float(self.invalid_commands),
            "invalid_calls": float(self.invalid_calls),
        }

    def _finish(self, reward: float, won: bool, *, truncated: bool, calls: int) -> StepResult:
        self.done = True
        self._give_back()
        metrics = {**self._metrics(won), "lost": float(not won and not truncated),
                   "truncated": float(truncated)}
        return StepResult(
            Observation([]), reward, True, outcome_reward=self.args.success_reward if won else 0.0,
            truncated=truncated, num_tool_calls=calls, metrics=metrics,
        )

    def _give_back(self) -> None:
        if self._release is not None:
            self._release()  # runs once: pool.release(game)
            self._release = None
        self.game = None

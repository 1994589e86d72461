"""The registered definition `textworld_express`: tasks, episodes and the oracle."""

from __future__ import annotations

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.twx import requirements, text
from agent_r1_async.envs.twx.args import TwxArgs
from agent_r1_async.envs.twx.episode import TwxEpisode
from agent_r1_async.envs.twx.oracle import gold_path
from agent_r1_async.envs.twx.pool import GamePool
from agent_r1_async.envs.twx.splits import game_id, make_tasks


@register_env("textworld_express")
class TwxEnv:
    """TextWorldExpress games (CoinCollector, Cooking, TWC) played with an `act` tool; needs Java."""

    Args = TwxArgs

    def __init__(self, args: TwxArgs, env_cfg: EnvConfig) -> None:
        requirements.require()  # one line naming what is missing and how to install it
        self.args, self.env_cfg = args, env_cfg
        self.pool = GamePool(args.max_games, args.jvm_heap_mb)  # the JVM starts on first use

    def make(self) -> TwxEpisode:
        return TwxEpisode(self.args, self.pool, self.env_cfg.max_turns)

    def tasks(self, split: str) -> list[Task]:
        return make_tasks(self.args, split)

    def gold_commands(self, task: Task) -> tuple[str, ...]:
        """The task's gold path (oracle.py: cached, replayed to a win)."""
        return gold_path(self.pool, game_id(task), self.args.gold_draws)

    def oracle(self, task: Task) -> list[str]:
        return [text.action_text(c) for c in self.gold_commands(task)]

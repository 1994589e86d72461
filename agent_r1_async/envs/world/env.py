"""`world`: a generated house of rooms, locked doors and keys; bring goal objects home.

Each episode is one world (tasks.py). The agent acts with one tool call per turn (`go`,
`take`, `drop`, `unlock`, `look`, `inventory`) and reads a short sentence back. The episode
ends, successful, on the action that leaves every goal object in the start room; it ends
unsuccessful after `env.max_turns` actions, or on an action without a tool call.

Rewards:
- process, potential-based: r_t = progress_reward * (d(s_{t-1}) - d(s_t)) / d(s_0), where d is
  the oracle's optimal remaining plan length (planner.py). A solved episode earns
  progress_reward in all (the sum telescopes); a detour earns back only what it cost, so
  wandering, cycles and undoing can never come out ahead. An action the world refuses, and a
  malformed call, add `invalid_action_penalty`.
- outcome: `success_reward` when solved, else 0.
Episode metrics: success, optimal_len (d(s_0)), steps, horizon_bucket (the power of two at or
above optimal_len), progress (1 - d(s_T) / d(s_0)), invalid_actions, novel.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task, Tool
from agent_r1_async.envs.registry import register_env
from agent_r1_async.envs.toolenv import (
    CallOutcome,
    EpisodeState,
    Score,
    Shaping,
    ToolEnv,
    tool_call_text,
)
from agent_r1_async.envs.world import planner
from agent_r1_async.envs.world.args import SUGGESTED_MAX_TURNS, WorldArgs
from agent_r1_async.envs.world.layout import Layout
from agent_r1_async.envs.world.state import (
    Action,
    WorldState,
    act,
    initial_state,
    normalize,
    solved,
)
from agent_r1_async.envs.world.tasks import make_tasks
from agent_r1_async.envs.world.tools import SYSTEM_PROMPT, TOOLS, WorldTool, action_call


def horizon_bucket(optimal_len: int) -> int:
    """The smallest power of two at or above `optimal_len` (at least 1)."""
    return 1 << max(optimal_len - 1, 0).bit_length()


class WorldDomain:
    """One episode's world, tools, prompt and rewards (a ToolDomain; `load` starts it)."""

    def __init__(self, args: WorldArgs) -> None:
        self.args = args
        self.tools: Sequence[Tool] = [WorldTool(name, self) for name in TOOLS]
        self.layout: Layout | None = None
        self.state: WorldState | None = None
        self.plan: list[Action] = []
        """An optimal plan from the current state (its length is d(s))."""
        self.d0 = self.d = 0
        self.invalid = 0
        self.novel = False
        self._pending = 0.0

    def load(self, task: Task) -> None:
        layout = task.meta.get("layout")
        if not isinstance(layout, Layout):
            raise EnvError(f"world: task {task.task_id!r} has no generated layout")
        self.layout, self.state = layout, initial_state(layout)
        self.plan = self._replan()
        self.d0 = self.d = len(self.plan)
        self.invalid, self._pending = 0, 0.0
        self.novel = bool(task.meta.get("novel", False))

    @property
    def solved(self) -> bool:
        return self.layout is not None and self.state is not None and solved(self.layout,
                                                                               self.state)

    def _replan(self) -> list[Action]:
        assert self.layout is not None and self.state is not None
        found = planner.plan(self.layout, self.state)
        if found is None:
            raise EnvError("world: the goal cannot be reached from this state")
        return found

    def act(self, action: Action) -> str:
        """Apply an action; its reward waits for `process_reward`."""
        if self.layout is None or self.state is None:
            raise EnvError("world: act() before load()")
        outcome = act(self.layout, self.state, action)
        reward = 0.0 if outcome.valid else self.args.invalid_action_penalty
        self.invalid += not outcome.valid
        if outcome.changed:
            tool, arg = action
            done = (tool, normalize(arg) if tool in ("take", "drop") else arg)
            if self.plan and self.plan[0] == done:  # along an optimal plan: d drops by one
                self.plan = self.plan[1:]
            else:
                self.plan = self._replan()
            before, self.d = self.d, len(self.plan)
            reward += self.args.progress_reward * (before - self.d) / max(self.d0, 1)
        self._pending = reward
        return outcome.text

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def process_reward(self, state: EpisodeState, outcome: CallOutcome) -> float:
        reward, self._pending = self._pending, 0.0
        return reward

    def score(self, task: Task, answer: str | None) -> Score:
        success = float(self.solved)
        return Score(self.args.success_reward * success, {
            "success": success,
            "optimal_len": float(self.d0),
            "horizon_bucket": float(horizon_bucket(self.d0)),
            "progress": 1.0 - self.d / self.d0 if self.d0 else 0.0,
            "invalid_actions": float(self.invalid),
            "novel": float(self.novel),
        })


class WorldToolEnv(ToolEnv):
    """A ToolEnv that loads the task's world at reset and ends the episode itself: on the
    action that solves it, or after `max_turns` actions (the last one's call still runs)."""

    def __init__(self, domain: WorldDomain, *, max_turns: int, tool_timeout_s: float,
                 shaping: Shaping) -> None:
        super().__init__(domain, max_turns=max_turns + 1, tool_timeout_s=tool_timeout_s,
                         shaping=shaping)
        self.world = domain
        self.turn_limit = max_turns

    async def reset(self, task: Task) -> Observation:
        self.world.load(task)
        return await super().reset(task)

    async def step(self, action: str) -> StepResult:
        result = await super().step(action)
        if result.done:
            return result
        assert self.state is not None
        if not self.world.solved and self.state.turn < self.turn_limit:
            return result
        return self._finish(None, reward=result.reward, num_calls=result.num_tool_calls,
                            truncated=not self.world.solved)

    def _finish(self, answer: str | None, *, reward: float, num_calls: int,
                truncated: bool) -> StepResult:
        result = super()._finish(answer, reward=reward, num_calls=num_calls,
                                 truncated=truncated)
        assert self.state is not None
        result.metrics["steps"] = float(self.state.turn)
        # Not an answer format here: 0 only when the episode ended on an action without a call.
        result.metrics["format_ok"] = float(answer is not None or truncated or self.world.solved)
        return result


@register_env("world")
class WorldEnv:
    """Generated rooms, locked doors and keys: fetch/collect tasks with ~6 to 100+ step plans."""

    Args = WorldArgs

    def __init__(self, args: WorldArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg = args, env_cfg
        self.shaping = Shaping(valid_call=0.0, invalid_call=args.invalid_action_penalty,
                               max_calls_per_action=1)
        self._tasks: dict[str, list[Task]] = {}

    @classmethod
    def suggested_max_turns(cls, args: WorldArgs) -> int:
        """`env.max_turns` that fits the oracle of the preset's worlds with room to spare."""
        return SUGGESTED_MAX_TURNS[args.horizon]

    def make(self) -> WorldToolEnv:
        cfg = self.env_cfg
        return WorldToolEnv(WorldDomain(self.args), max_turns=cfg.max_turns,
                            tool_timeout_s=cfg.tool_timeout_s, shaping=self.shaping)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = make_tasks(self.args, split)
        return self._tasks[split]

    def oracle(self, task: Task) -> list[str]:
        """An optimal plan from the start, one tool call per action."""
        layout = task.meta["layout"]
        actions = planner.plan(layout, initial_state(layout)) or []
        return [tool_call_text(action_call(a)) for a in actions]

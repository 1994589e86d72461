"""`world`: a generated house of rooms, locked doors and keys; bring goal objects home.

Each episode is one world (tasks.py). The agent acts with one tool call per turn (`go`,
`take`, `drop`, `unlock`, `look`, `inventory`) and reads a short sentence back. The episode
ends, successful, on the action that leaves every goal object in the start room; it ends
unsuccessful after `env.max_turns` actions (a task of a horizon `mix`: after its preset's
`SUGGESTED_MAX_TURNS`, if fewer), on an action without a tool call, or, with
`end_after_repeats` K, on the K-th time in a row that one action gets one answer (stuck).

Rewards:
- process, potential-based: r_t = progress_reward * (d(s_{t-1}) - d(s_t)) / d(s_0), where d is
  the oracle's optimal remaining plan length (planner.py). A solved episode earns
  progress_reward in all (the sum telescopes); a detour earns back only what it cost, so
  wandering, cycles and undoing can never come out ahead. An action the world refuses, and a
  malformed call, add `invalid_action_penalty`.
- outcome: `success_reward` when solved, else 0.
Episode metrics: success, optimal_len (d(s_0)), steps, horizon_bucket (the power of two at or
above optimal_len), progress (1 - d(s_T) / d(s_0)), invalid_actions, novel, stuck (1 when
`end_after_repeats` ended it).

Oracle summary (`state_summary`, for demonstrations under `context.builder: compact`): where
the agent stands, in words it has read: its room and the way back to the start room, what it
carries, the doors it unlocked, the goal objects home and still to bring, where it saw those
and the unused keys, and the locked doors it saw.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.base import EnvError, Observation, StepResult, Task, Tool, Untrained
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
from agent_r1_async.envs.world.detours import with_detours
from agent_r1_async.envs.world.explorer import explore
from agent_r1_async.envs.world.layout import Layout
from agent_r1_async.envs.world.state import (
    CARRIED,
    Action,
    WorldState,
    act,
    carried,
    initial_state,
    normalize,
    solved,
)
from agent_r1_async.envs.world.tasks import make_tasks
from agent_r1_async.envs.world.tools import SYSTEM_PROMPT, TOOLS, WorldTool, action_call


def horizon_bucket(optimal_len: int) -> int:
    """The smallest power of two at or above `optimal_len` (at least 1)."""
    return 1 << max(optimal_len - 1, 0).bit_length()


def _the(names: list[str]) -> str:
    """"the a", "the a and the b", "the a, the b and the c"."""
    named = [f"the {n}" for n in names]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def state_summary(layout: Layout, state: WorldState, visited: set[int]) -> str:
    """The episode's state as the agent could summarize it (first person), from what it has
    seen: `visited` rooms (their items and locked doors were described on entering, and only
    the agent moves things). The way back is known: the only path home is the one walked."""
    home = layout.names[layout.start]
    at, way = state.room, []
    for nxt in layout.path(state.room, layout.start):
        way.append(layout.way(at, nxt))
        at = nxt
    back = f"; the way back to the {home}: {', '.join(way)}" if way else ""
    lines = [f"I am in the {layout.names[state.room]}{back}."]
    held = carried(state)
    lines.append(f"I carry {_the(held)}." if held else "I carry nothing.")
    opened = sorted(layout.locks[d] for d in state.opened)
    if opened:
        lines.append(f"I unlocked {_the([f'{c} door' for c in opened])}.")
    home_now = [t for t in layout.targets if state.where[t] == layout.start]
    missing = [t for t in layout.targets if state.where[t] != layout.start]
    if home_now:
        lines.append(f"Already in the {home}: {_the(home_now)}.")
    if missing:
        lines.append(f"Still to drop in the {home}: {_the(missing)}.")
    else:
        lines.append("Every goal object is home.")
    wanted = [*missing, *(i for i in sorted(layout.items) if layout.is_key(i))]
    seen = [f"the {i} in the {layout.names[state.where[i]]}" for i in wanted
            if state.where[i] in visited and state.where[i] != CARRIED
            and state.where[i] != layout.start]
    if seen:
        lines.append(f"Seen: {', '.join(seen)}.")
    locked = []
    for door, color in sorted(layout.locks.items()):
        if door in state.opened:
            continue
        for room, other in ((layout.parent[door], door), (door, layout.parent[door])):
            if room in visited:
                locked.append(f"the {color} door {layout.way(room, other)} of the "
                              f"{layout.names[room]}")
                break
    if locked:
        lines.append(f"Locked: {', '.join(locked)}.")
    return " ".join(lines)


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
        self.visited: set[int] = set()
        """Rooms the agent has been in (it has read their description)."""
        self.last: tuple[str, str, str] | None = None
        """The last action (tool, normalized argument) and the world's answer to it."""
        self.repeats = 0
        """How many times in a row `last` was sent and answered so."""

    def load(self, task: Task) -> None:
        layout = task.meta.get("layout")
        if not isinstance(layout, Layout):
            raise EnvError(f"world: task {task.task_id!r} has no generated layout")
        self.layout, self.state = layout, initial_state(layout)
        self.plan = self._replan()
        self.d0 = self.d = len(self.plan)
        self.invalid, self._pending = 0, 0.0
        self.novel = bool(task.meta.get("novel", False))
        self.visited = {self.state.room}
        self.last, self.repeats = None, 0

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
        self.visited.add(self.state.room)
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
        seen = (action[0], normalize(action[1]), outcome.text)
        self.repeats = self.repeats + 1 if seen == self.last else 1
        self.last = seen
        return outcome.text

    @property
    def stuck(self) -> bool:
        """`end_after_repeats` reached: the same action got the same answer that many times
        in a row."""
        k = self.args.end_after_repeats
        return k > 0 and self.repeats >= k

    def state_summary(self) -> str:
        """Where the episode stands in words (module `state_summary`)."""
        if self.layout is None or self.state is None:
            raise EnvError("world: state_summary() before load()")
        return state_summary(self.layout, self.state, self.visited)

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def process_reward(self, state: EpisodeState, outcome: CallOutcome) -> float:
        reward, self._pending = self._pending, 0.0
        return reward

    def metrics(self) -> dict[str, float]:
        """The episode's metrics as they stand (its score's, at the end)."""
        return {
            "success": float(self.solved),
            "optimal_len": float(self.d0),
            "horizon_bucket": float(horizon_bucket(self.d0)),
            "progress": 1.0 - self.d / self.d0 if self.d0 else 0.0,
            "invalid_actions": float(self.invalid),
            "novel": float(self.novel),
            "stuck": float(self.stuck),
        }

    def score(self, task: Task, answer: str | None) -> Score:
        return Score(self.args.success_reward * float(self.solved), self.metrics())


class WorldToolEnv(ToolEnv):
    """A ToolEnv that loads the task's world at reset and ends the episode itself: on the
    action that solves it, on the action that makes it `stuck`, or after `max_turns`
    actions, or the task's own `turn_limit` if fewer (the last one's call still runs)."""

    def __init__(self, domain: WorldDomain, *, max_turns: int, tool_timeout_s: float,
                 shaping: Shaping) -> None:
        super().__init__(domain, max_turns=max_turns + 1, tool_timeout_s=tool_timeout_s,
                         shaping=shaping)
        self.world = domain
        self.max_turn_limit = max_turns
        self.turn_limit = max_turns

    async def reset(self, task: Task) -> Observation:
        self.world.load(task)
        limit = task.meta.get("turn_limit")
        self.turn_limit = (min(self.max_turn_limit, limit) if isinstance(limit, int)
                           else self.max_turn_limit)
        return await super().reset(task)

    def state_summary(self) -> str:
        """The oracle summary of the episode so far: what a demonstration's summary step says
        under `context.builder: compact` (sft/demos.py)."""
        return self.world.state_summary()

    async def step(self, action: str) -> StepResult:
        result = await super().step(action)
        if result.done:
            return result
        assert self.state is not None
        if not self.world.solved and not self.world.stuck and self.state.turn < self.turn_limit:
            # every step reports the metrics so far: an episode whose context outgrows
            # model.max_model_len ends before the env scores it, and keeps these
            result.metrics.update(self.world.metrics())
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
        """`env.max_turns` that fits the oracle of the preset's worlds with room to spare
        (of a mix: its longest preset's)."""
        return max(SUGGESTED_MAX_TURNS[h] for h in args.presets())

    def make(self) -> WorldToolEnv:
        cfg = self.env_cfg
        return WorldToolEnv(WorldDomain(self.args), max_turns=cfg.max_turns,
                            tool_timeout_s=cfg.tool_timeout_s, shaping=self.shaping)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = make_tasks(self.args, split)
        return self._tasks[split]

    def oracle(self, task: Task) -> list[str]:
        """The demonstrator's actions from the start, one tool call per action
        (`env.args.demonstrator`: the explorer's, or the planner's optimal plan), with
        `env.args.demo_detours`' mistakes among them as `Untrained` actions."""
        layout = task.meta["layout"]
        if self.args.demonstrator == "explorer":
            actions = explore(layout) or []
        else:
            actions = planner.plan(layout, initial_state(layout)) or []
        if not self.args.demo_detours:
            return [tool_call_text(action_call(a)) for a in actions]
        return [tool_call_text(action_call(a)) if trained
                else Untrained(tool_call_text(action_call(a)))
                for a, trained in with_detours(layout, actions, self.args.demo_detours,
                                               task.task_id)]

"""Env metrics from every step are kept, the success plot follows the
env's own success metric, and evaluation tables show env-specific metrics."""

from __future__ import annotations

import asyncio

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.evaluate import eval_columns
from agent_r1_async.run.output.report import success_metric
from tests.fakes.engine import FakeEngine


class GuessEnv:
    """Step 0 reports `hint_used`, step 1 ends with `accuracy` (and overrides `hint_used`)."""

    def __init__(self) -> None:
        self.n = 0

    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        self.n += 1
        if self.n == 1:
            return StepResult(Observation([{"role": "user", "content": "warmer"}]), 0.0, False,
                              metrics={"hint_used": 1.0, "distance": 3.0})
        return StepResult(Observation([]), 0.0, True, outcome_reward=1.0,
                          metrics={"accuracy": 1.0, "distance": 0.0})


def test_metrics_of_every_step_are_merged_into_the_episode():
    tok = load_tokenizer(tiny_model_dir())
    rollout = Rollout(engine=FakeEngine.repeating([5]), tokenizer=tok, builder=FullContext(), env_name="guess",
                      actor_id="a0", max_model_len=512, max_turns=4, step_timeout_s=5.0)

    async def emit(msg) -> None:
        pass

    end = asyncio.run(rollout.run(GuessEnv(), Task("t", "guess"), EpisodeIds.fresh("g", 1), emit))
    # Before: only the final step's {"accuracy": 1, "distance": 0} survived.
    assert end.metrics == {"hint_used": 1.0, "distance": 0.0, "accuracy": 1.0}


def test_success_plot_uses_the_envs_own_success_metric():
    assert success_metric([{"update": 1, "env/success": 0.5}]) == "success"
    assert success_metric([{"update": 1, "env/em": 0.2, "env/f1": 0.4}]) == "em"
    assert success_metric([{"update": 1, "eval/after/accuracy": 0.7}]) == "accuracy"
    assert success_metric([{"update": 1, "reward/mean": 0.1}]) is None


def test_eval_table_keeps_env_specific_metrics():
    result = {"episodes": 32.0, "outcome_reward": 0.5, "mean_return": 0.6, "failed_rate": 0.0,
              "mean_steps": 2.0, "accuracy": 0.5, "format_ok": 1.0, "turns": 2.0,
              "tool_calls": 1.0, "tool_errors": 0.0, "version": 3}
    assert eval_columns(result) == ["episodes", "outcome_reward", "format_ok", "tool_calls",
                                    "failed_rate", "accuracy"]

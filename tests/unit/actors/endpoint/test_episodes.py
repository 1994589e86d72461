"""Black-box episodes end to end on one event loop: the `blackbox` env's agent (an `openai`
client on a worker thread) calls the endpoint the runner started, its calls become the
episode's step records and its reward the outcome; every way it can fail ends the episode
with one line and the status a rollout would give, and never hangs the actor."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.endpoint.episodes import BlackboxRunner
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.actors.runner import RolloutRunner, open_runner
from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.offload import BLOCKING_WARNING
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import EpisodeEnd, StepRecord, decode_data, encode
from tests.fakes.engine import FakeEngine
from tests.unit.actors.endpoint import agents

IM_END = 2
AGENTS = "tests.unit.actors.endpoint.agents"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


def answer(tok, text: str = "Four.") -> list[int]:
    return [*tok.encode(text, add_special_tokens=False), IM_END]


def config(agent: str, max_turns: int = 4, timeout_s: float = 0.0, step_timeout_s: float = 5.0,
           max_model_len: int = 512, tasks: str = f"{AGENTS}:tasks", max_new_tokens: int = 16,
           **args: Any):
    return config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": max_model_len},
        "engine": {"backend": "hf", "max_new_tokens": max_new_tokens},
        "env": {"name": "blackbox", "max_turns": max_turns, "step_timeout_s": step_timeout_s,
                "tool_timeout_s": min(step_timeout_s, 1.0),
                "args": {"agent": agent if ":" in agent else f"{AGENTS}:{agent}", "tasks": tasks,
                         "timeout_s": timeout_s, **args}},
    })


def play(tok, engine, agent: str, group: int = 1, cancel_after_s: float | None = None,
         counters: list[Any] | None = None,
         **cfg_kw: Any) -> tuple[list[EpisodeEnd], list[StepRecord]]:
    """Run `group` concurrent episodes of the first train task; (their ends, every step record
    as the wire decodes it). `counters` gets the actor's counters."""
    cfg = config(agent, **cfg_kw)
    spec = get_env_spec(cfg.env)
    rollout = Rollout.from_config(cfg, engine, tok, spec.name, "actor-0")
    if counters is not None:
        counters.append(rollout.counters)
    task = spec.tasks("train")[0]
    sent: list[Any] = []

    async def emit(msg: Any) -> None:
        sent.append(decode_data(encode(msg)))

    async def main() -> list[EpisodeEnd]:
        runner = await open_runner(cfg, spec, rollout, None, 0)
        assert isinstance(runner, BlackboxRunner)
        try:
            runs = [asyncio.create_task(runner.run(task, EpisodeIds.fresh("g-1", group), emit))
                    for _ in range(group)]
            if cancel_after_s is not None:
                await asyncio.sleep(cancel_after_s)
                for r in runs:
                    r.cancel()
                await asyncio.gather(*runs, return_exceptions=True)
                return [m for m in sent if isinstance(m, EpisodeEnd)]
            return list(await asyncio.gather(*runs))
        finally:
            await runner.close()
            assert len(runner.sessions) == 0

    ends = asyncio.run(main())
    return ends, [m for m in sent if isinstance(m, StepRecord)]


def test_a_group_of_openai_agents_becomes_step_records_and_outcomes(tok):
    engine = FakeEngine.repeating(answer(tok))
    out: list[Any] = []
    ends, records = play(tok, engine, "two_turns", group=3, counters=out)
    (c,) = out  # the actor's counters saw every call, and the agents' time as env time
    assert (c.tokens, c.episodes_done, c.episodes_failed, c.in_flight) == (
        6 * len(answer(tok)), 3, 0, 0)
    assert c.env_time_s > 0 and c.gen_time_s > 0
    assert [e.status for e in ends] == ["ok"] * 3
    assert [e.outcome_reward for e in ends] == [0.75] * 3
    assert all(e.num_steps == 2 and e.group_size == 3 and e.group_id == "g-1" for e in ends)
    assert all(e.metrics == {"calls": 2.0, "divergences": 0.0} for e in ends)
    assert len({e.episode_id for e in ends}) == 3 and len(engine.calls) == 6
    for end in ends:
        steps = sorted((r for r in records if r.episode_id == end.episode_id),
                       key=lambda r: r.step_index)
        assert [(s.step_index, s.done, s.process_reward) for s in steps] == [
            (0, False, 0.0), (1, True, 0.0)]
        assert all(s.action_ids.tolist() == answer(tok) for s in steps)
        assert all(s.env_name == "blackbox" and s.task_id == "train-0" for s in steps)
        # the second turn extends the first: its context + action + "\n" + the follow-up
        first, second = steps[0].context_ids.tolist(), steps[1].context_ids.tolist()
        assert second[:len(first) + len(answer(tok))] == [*first, *answer(tok)]
        assert tok.decode(second).endswith(
            "<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n")


def test_an_async_agent_runs_too(tok):
    ends, records = play(tok, FakeEngine.repeating(answer(tok)), "async_one_turn")
    assert [(e.status, e.outcome_reward, e.num_steps) for e in ends] == [("ok", 0.5, 1)]
    assert [(r.step_index, r.done) for r in records] == [(0, True)]


@pytest.mark.parametrize("agent, status, error", [
    ("raises_after_one_call", "env_error",
     f"agent {AGENTS}:raises_after_one_call raised ValueError: boom"),
    ("makes_no_call", "env_error",
     f"agent {AGENTS}:makes_no_call made no generation call on its session"),
    ("returns_a_string", "env_error",
     f"agent {AGENTS}:returns_a_string: its return value is '1.0' (str), expected a finite "
     "real number (a numeric string is not one)"),
    ("long_prompt", "env_error", "the agent's first context of "),
])
def test_an_agent_failure_fails_its_episode_in_one_line(tok, agent, status, error):
    ends, records = play(tok, FakeEngine.repeating(answer(tok)), agent, max_model_len=256)
    (end,) = ends
    assert end.status == status and end.error.startswith(error), end.error
    assert "\n" not in end.error and end.outcome_reward == 0.0
    assert end.num_steps == len(records) and all(not r.done for r in records)


def _sleeping(tok, **cfg_kw: Any) -> list[EpisodeEnd]:
    """One episode of the agent that sleeps 30 s after its first call; its end comes while
    the agent still sleeps (the episode was cut at its timeout, nothing waited for the
    agent's thread), which is checked here."""
    first = len(agents.SLEEPERS)
    ends, _ = play(tok, FakeEngine.repeating(answer(tok)), "sleeps_after_one_call", **cfg_kw)
    assert agents.SLEEPERS[first:] == [{"awake": False}]
    return ends


def test_an_agent_past_its_timeout_ends_the_episode_on_time(tok, caplog):
    ends = _sleeping(tok, timeout_s=1.0)
    # a synchronous agent is expected to block: that is not reported as a blocked loop
    assert BLOCKING_WARNING not in caplog.text
    (end,) = ends
    assert end.status == "timeout"
    assert end.error == f"agent {AGENTS}:sleeps_after_one_call took longer than 1 s " \
                        "(env.args.timeout_s)"
    assert end.num_steps == 1


def test_the_default_timeout_is_step_timeout_times_max_turns(tok):
    ends = _sleeping(tok, max_turns=2, step_timeout_s=0.75)
    assert ends[0].status == "timeout" and ends[0].error.endswith(
        "took longer than 1.5 s (env.step_timeout_s x env.max_turns)")


def test_calls_past_max_turns_are_refused_and_the_episode_is_truncated(tok):
    ends, records = play(tok, FakeEngine.repeating(answer(tok)), "calls_until_refused",
                         max_turns=3)
    (end,) = ends
    assert (end.status, end.outcome_reward, end.num_steps) == ("truncated", 0.0, 3)
    assert end.error == "the agent made more than env.max_turns=3 generation calls"
    assert [(r.step_index, r.done) for r in records] == [(0, False), (1, False), (2, True)]
    assert end.metrics["calls"] == 3.0


def test_an_engine_failure_is_the_episodes_engine_error(tok):
    engine = FakeEngine.repeating(answer(tok), fail_on_call=0)
    ends, records = play(tok, engine, "two_turns")
    assert ends[0].status == "engine_error" and records == []
    assert ends[0].error == "EngineError: scripted engine failure"


def test_a_stopping_actor_aborts_the_episode_and_still_sends_its_end(tok):
    engine = FakeEngine.repeating(answer(tok), hang_from=1)  # the second call never answers
    ends, records = play(tok, engine, "two_turns", cancel_after_s=1.5)
    (end,) = ends  # the second call would hang for an hour: only the stop ended the episode
    assert (end.status, end.error, end.num_steps) == ("aborted", "actor stopped", 1)
    assert [(r.step_index, r.done) for r in records] == [(0, False)]


def test_an_ordinary_env_keeps_our_rollout_and_no_endpoint(tok):
    cfg = config_from_dict({"model": {"name_or_path": "tiny-random-llama"},
                            "env": {"name": "arithmetic"}})
    spec = get_env_spec(cfg.env)
    rollout = Rollout.from_config(cfg, FakeEngine.repeating([5]), tok, spec.name, "a0")
    runner = asyncio.run(open_runner(cfg, spec, rollout, None, 0))
    assert isinstance(runner, RolloutRunner) and runner.make == spec.make
    assert isinstance(rollout.builder, type(FullContext()))


@pytest.mark.parametrize("final, reward", [("right", 1.0), ("wrong", 0.0)])
def test_the_example_openai_agent_solves_a_task_through_a_tool_call(tok, final, reward):
    from agent_r1_async.envs.arithmetic import ArithmeticArgs, make_tasks

    task = make_tasks(ArithmeticArgs(), "train")[0]
    call = ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "'
            f'{task.meta["expression"]}"}}}}\n</tool_call>')
    number = task.answer if final == "right" else task.answer + 1
    engine = FakeEngine.scripted([answer(tok, call), answer(tok, f"<answer>{number}</answer>")])
    ends, records = play(tok, engine, "examples.openai_agent:run",
                         tasks="examples.openai_agent:tasks", max_model_len=1024,
                         max_new_tokens=64, agent_args={"max_turns": 3})
    (end,) = ends
    assert (end.status, end.outcome_reward, end.num_steps) == ("ok", reward, 2)
    assert [r.num_tool_calls for r in records] == [1, 0]
    # the calculator's result came back to the model as the tool message of turn 2
    assert tok.decode(records[1].context_ids.tolist()).endswith(
        f"<|im_start|>tool\n{task.answer}<|im_end|>\n<|im_start|>assistant\n")

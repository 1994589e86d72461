"""Rollout: contiguous steps, exactly one end per episode, failure isolation, length limits."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.envs.base import Task
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import EpisodeEnd, StepRecord, decode_data, encode
from tests.fakes.engine import FakeEngine
from tests.fakes.envs import ScriptedEnv

TASK = Task("t1", "What is 2+2?", answer="4")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_model_dir())


def _rollout(tokenizer, engine, **kw) -> Rollout:
    args = dict(
        engine=engine, tokenizer=tokenizer, builder=FullContext(), env_name="scripted",
        actor_id="a0", max_model_len=512, max_turns=4, step_timeout_s=5.0,
    )
    args.update(kw)
    return Rollout(**args)


def _run(rollout: Rollout, env: ScriptedEnv) -> tuple[EpisodeEnd, list]:
    sent: list = []

    async def emit(msg) -> None:
        sent.append(decode_data(encode(msg)))  # everything emitted survives the wire

    end = asyncio.run(rollout.run(env, TASK, EpisodeIds("e1", "g1", 4), emit))
    return end, sent


def test_ok_episode_emits_contiguous_steps_then_one_end(tokenizer):
    hello = tokenizer.encode("hello", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    engine = FakeEngine.repeating([*hello, eos])
    env = ScriptedEnv(turns=3)
    end, sent = _run(_rollout(tokenizer, engine), env)
    steps = [m for m in sent if isinstance(m, StepRecord)]
    assert [s.step_index for s in steps] == [0, 1, 2]
    assert isinstance(sent[-1], EpisodeEnd) and sum(isinstance(m, EpisodeEnd) for m in sent) == 1
    assert end.status == "ok" and end.num_steps == 3 and end.outcome_reward == 1.0
    assert end.metrics == {"em": 1.0} and end.group_size == 4
    assert [s.done for s in steps] == [False, False, True]
    assert [s.process_reward for s in steps] == pytest.approx([0.1, 0.2, 0.3])
    assert env.actions == ["hello"] * 3  # decoded text, eos stripped
    for s in steps:
        assert s.action_ids == [*hello, eos] and s.behavior_logprobs == [-0.5] * (len(hello) + 1)
    # Step t's context is step t-1's context + its action (+ turn close + tool obs + prompt):
    # the full builder makes contexts grow and each one starts with the previous one.
    for prev, cur in itertools.pairwise(steps):
        assert cur.context_ids[: len(prev.context_ids) + len(prev.action_ids)] == (
            prev.context_ids + prev.action_ids
        )


def test_env_exception_ends_only_that_episode(tokenizer):
    end, sent = _run(_rollout(tokenizer, FakeEngine.repeating([5, 6])), ScriptedEnv(turns=3, raise_on=1))
    assert end.status == "env_error" and "scripted env failure at 1" in end.error
    assert end.num_steps == 1  # step 0 was emitted; step 1 never existed
    assert [type(m).__name__ for m in sent] == ["StepRecord", "EpisodeEnd"]


def test_env_reset_failure_sends_an_end_with_zero_steps(tokenizer):
    end, sent = _run(_rollout(tokenizer, FakeEngine.repeating([5])), ScriptedEnv(raise_on=-1))
    assert end.status == "env_error" and end.num_steps == 0 and len(sent) == 1


def test_step_timeout(tokenizer):
    rollout = _rollout(tokenizer, FakeEngine.repeating([5]), step_timeout_s=0.05)
    end, sent = _run(rollout, ScriptedEnv(turns=3, hang_on=0))
    assert end.status == "timeout" and "step_timeout_s=0.05" in end.error
    assert end.num_steps == 0 and len(sent) == 1


def test_engine_failure(tokenizer):
    end, _ = _run(_rollout(tokenizer, FakeEngine.repeating([5], fail_on_call=1)), ScriptedEnv(turns=3))
    assert end.status == "engine_error" and "scripted engine failure" in end.error
    assert end.num_steps == 1


def test_full_context_truncates_and_the_engine_owns_the_budget(tokenizer):
    engine = FakeEngine.repeating(list(range(100, 140)))  # 40 tokens per action
    rollout = _rollout(tokenizer, engine, max_model_len=100)
    end, sent = _run(rollout, ScriptedEnv(turns=4))
    # The rollout asks for the engine's own budget (capped there by the room left in
    # max_model_len: actors/engines/test_hf.py checks that); once the context reaches 100 tokens there is
    # no room and the episode ends "truncated" with its earlier steps kept.
    assert engine.calls and all(budget is None for _, budget in engine.calls)
    assert all(len(ctx) < 100 for ctx, _ in engine.calls)
    assert end.status == "truncated" and "max_model_len=100" in end.error
    assert end.num_steps == len([m for m in sent if isinstance(m, StepRecord)]) >= 1


def test_env_that_never_ends_is_cut_at_max_turns(tokenizer):
    end, sent = _run(_rollout(tokenizer, FakeEngine.repeating([5]), max_turns=2), ScriptedEnv(never_done=True))
    assert end.status == "truncated" and end.num_steps == 2
    assert sent[1].done  # the last step says done so the buffer can close the episode


def test_counters_track_tokens_and_outcomes(tokenizer):
    rollout = _rollout(tokenizer, FakeEngine.repeating([5, 6, 7]))
    _run(rollout, ScriptedEnv(turns=2))
    _run(rollout, ScriptedEnv(turns=2, raise_on=0))
    c = rollout.counters
    assert c.tokens == 3 * 3  # two steps of the ok episode + one of the failed one
    assert (c.episodes_done, c.episodes_failed, c.in_flight) == (1, 1, 0)


def test_a_world_episode_cut_by_its_context_keeps_the_env_s_metrics_so_far(tokenizer):
    """The world reports its metrics on every step, so an episode that ends because its
    context reached model.max_model_len (before the env could score it) is still measured:
    evaluation rows and the horizon curve count it where it stood, not as missing."""
    from agent_r1_async.config import EnvConfig
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.envs.toolenv import ToolCall, tool_call_text

    spec = get_env_spec(EnvConfig(name="world", max_turns=50, args={
        "horizon": "short", "num_train": 2, "num_dev": 2, "num_test": 2,
        "demonstrator": "planner"}))
    task = spec.tasks("dev")[0]
    look = tokenizer.encode(tool_call_text(ToolCall("look", {})), add_special_tokens=False)
    rollout = _rollout(tokenizer, FakeEngine.repeating([*look, tokenizer.eos_token_id]),
                       max_model_len=1200, max_turns=50)
    end = asyncio.run(rollout.run(spec.make(), task, EpisodeIds("e1", "g1", 4),
                                  lambda m: asyncio.sleep(0)))
    assert end.status == "truncated" and "max_model_len=1200" in end.error
    d0 = len(spec.oracle(task))
    assert end.metrics["optimal_len"] == d0 and end.metrics["progress"] == 0.0
    assert end.metrics["success"] == 0.0 and end.metrics["invalid_actions"] == 0.0


def test_truncate_to_sends_deltas_between_cuts(tokenizer):
    """By hand: the instruction and generation prompt are 37 ids and a turn 15 (prompt 3, action
    2, close 1, answer 9), so the context after n turns is 37 + 15n. With max_tokens 120 the 7th
    step (n = 6, 127) is the first cut: truncate_to 80 keeps 2 turns (67) and the 8th step
    extends it (82), where cutting to fit at every step sends both whole (112)."""
    from agent_r1_async.actors.context import TruncateContext
    from agent_r1_async.wire.delta import WHOLE, resolve_contexts

    hello = tokenizer.encode("hello", add_special_tokens=False)

    def steps(builder: TruncateContext, delta: bool = True) -> list[StepRecord]:
        engine = FakeEngine.repeating([*hello, tokenizer.eos_token_id])
        rollout = _rollout(tokenizer, engine, builder=builder, max_turns=10, delta_records=delta)
        return [m for m in _run(rollout, ScriptedEnv(turns=8))[1] if isinstance(m, StepRecord)]

    low = steps(TruncateContext(120, truncate_to=80))
    assert [len(c) for c in resolve_contexts(low)] == [37, 52, 67, 82, 97, 112, 67, 82]
    assert [i for i, s in enumerate(low) if s.context_from == WHOLE] == [0, 6]
    assert [list(c) for c in resolve_contexts(low)] == [
        list(s.context_ids) for s in steps(TruncateContext(120, truncate_to=80), delta=False)]
    every = steps(TruncateContext(120))
    assert [len(c) for c in resolve_contexts(every)][5:] == [112, 112, 112]
    assert [i for i, s in enumerate(every) if s.context_from == WHOLE] == [0, 6, 7]

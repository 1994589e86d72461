"""Demonstrations under `context.builder: compact`: oracle-written summaries as steps."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.actors.context import make_context_builder
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.config import ContextConfig, EnvConfig
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.sft.demos import (
    DemoError,
    DemoStats,
    encode_action,
    oracle_demos,
    replay_oracle,
)
from agent_r1_async.sft.train import demo_pairs, sft_micro_batches
from agent_r1_async.wire.messages import StepRecord
from tests.fakes.engine import FakeEngine

BUDGET = 900  # SmolLM2: the world's instruction ~470 tokens, a turn ~60


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


@pytest.fixture(scope="module")
def world():
    return get_env_spec(EnvConfig(name="world", max_turns=64, args={
        "num_train": 3, "num_dev": 2, "num_test": 2, "horizon": "medium"}))


def _compact(tok, **kw):
    return make_context_builder(
        ContextConfig(**{"builder": "compact", "max_tokens": BUDGET, **kw}), tok)


def _summaries_by_replay(world, task, actions: list[str]) -> str:
    """The env's own summary after `actions`, in a fresh env."""
    async def play() -> str:
        env = world.make()
        await env.reset(task)
        for a in actions:
            await env.step(a)
        return env.state_summary()
    return asyncio.run(play())


def test_oracle_demos_hold_the_worlds_summaries_in_the_rollout_layout(world, tok):
    task = world.tasks("train")[0]
    builder = _compact(tok)
    demo = asyncio.run(replay_oracle(world, task, tok, builder))
    assert demo is not None and demo.outcome_reward == 1.0 and demo.summaries >= 1
    oracle = world.oracle(task)
    assert len(demo.steps) == len(oracle) + demo.summaries
    actions: list[str] = []
    summary_steps = []
    for i, s in enumerate(demo.steps):
        text = tok.decode(s.action_ids, skip_special_tokens=True)
        if text.startswith("I am in the "):
            # The summary is what the env says of its state at that point, + eos.
            assert s.action_ids == encode_action(tok, _summaries_by_replay(world, task, actions))
            summary_steps.append(i)
        else:
            assert text == oracle[len(actions)]
            actions.append(text)
    assert len(summary_steps) == demo.summaries
    # A rollout whose engine samples exactly the demonstrated ids records the same rows: the
    # demonstration's summaries come where the rollout's would, in the same token layout.
    rollout = Rollout(engine=FakeEngine.scripted([s.action_ids for s in demo.steps]),
                      tokenizer=tok, builder=_compact(tok), env_name="world", actor_id="a0",
                      max_model_len=4096, max_turns=64, step_timeout_s=10.0)
    recorded: list[StepRecord] = []

    async def emit(msg) -> None:
        if isinstance(msg, StepRecord):
            recorded.append(msg)

    end = asyncio.run(rollout.run(world.make, task, EpisodeIds("e", "g", 1), emit))
    assert end.status == "ok" and end.metrics["context/compactions"] == demo.summaries
    assert [(list(r.context_ids), list(r.action_ids)) for r in recorded] == [
        (s.context_ids, s.action_ids) for s in demo.steps]
    # SFT trains the summary tokens like any action's.
    mbs = sft_micro_batches(demo_pairs([demo]), 100_000, pad_id=0, pack=True)
    assert sum(mb.num_action_tokens for mb in mbs) == sum(len(s.action_ids) for s in demo.steps)


def test_no_state_summary_no_summary_steps_and_a_too_long_summary_fails(world, tok):
    spec = get_env_spec(EnvConfig(name="arithmetic", max_turns=3))
    task = spec.tasks("dev")[0]
    full = asyncio.run(replay_oracle(spec, task, tok, make_context_builder(ContextConfig(), tok)))
    tight = asyncio.run(replay_oracle(spec, task, tok, make_context_builder(ContextConfig(
        builder="compact", max_tokens=64, summary_max_tokens=8), tok)))
    assert full is not None and tight is not None and tight.summaries == 0
    assert [(s.context_ids, s.action_ids) for s in tight.steps] == [
        (s.context_ids, s.action_ids) for s in full.steps]
    with pytest.raises(DemoError, match=r"oracle summary has \d+ tokens, above "
                                        r"context.summary_max_tokens \(8\)"):
        asyncio.run(replay_oracle(world, world.tasks("train")[0], tok,
                                  _compact(tok, summary_max_tokens=8)))
    stats = DemoStats()
    kept = oracle_demos(world, world.tasks("train"), tok, _compact(tok), 4096, stats=stats)
    assert stats.kept == len(kept) and stats.summaries == sum(d.summaries for d in kept) > 0

"""Demonstrations with detours (refused mistakes, shown but not trained) and the world's
`end_after_repeats`: hand-derived refusals, the demonstrator's own actions kept intact, the
mistakes out of the SFT loss, and an episode that ends when the agent is stuck."""

from __future__ import annotations

import asyncio
import random

import pytest

from agent_r1_async.actors.context import make_context_builder
from agent_r1_async.config import ContextConfig, EnvConfig
from agent_r1_async.envs.base import Untrained
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.world.args import WorldArgs
from agent_r1_async.envs.world.detours import draw_mistake, refused_actions, with_detours
from agent_r1_async.envs.world.explorer import explore
from agent_r1_async.envs.world.layout import Layout
from agent_r1_async.envs.world.state import CARRIED, WorldState, act, initial_state
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.sft.demos import replay_oracle
from agent_r1_async.sft.train import demo_pairs, sft_micro_batches
from tests.unit.envs.world.test_env import _call, _play

# hall(0) at (0, 0); kitchen(1) east of it behind the red door; pantry(2) west of it, where
# the red key lies; the cup in the kitchen.
LAYOUT = Layout(("hall", "kitchen", "pantry"), ((0, 0), (1, 0), (-1, 0)), (-1, 0, 0),
                {1: "red"}, {"red key": 2, "cup": 1}, ("cup",), 0)


def test_the_refused_actions_of_a_hand_built_state():
    start = initial_state(LAYOUT)
    assert refused_actions(LAYOUT, start) == {
        "go": [("go", "north"), ("go", "south"), ("go", "east")],  # east: the locked door
        "take": [("take", "cup"), ("take", "red key")],  # neither lies in the hall
        "unlock": [("unlock", "north"), ("unlock", "south"), ("unlock", "east"),
                   ("unlock", "west")],  # east: the red key is not held
    }
    assert start == initial_state(LAYOUT)  # asked on copies
    # In the pantry the key lies here (taking it is no mistake); holding it in the hall, the
    # red door unlocks and opens: only the three walls and the cup remain to get wrong.
    pantry = WorldState(2, {"red key": 2, "cup": 1})
    assert refused_actions(LAYOUT, pantry)["take"] == [("take", "cup")]
    held = WorldState(0, {"red key": CARRIED, "cup": 1})
    refused = refused_actions(LAYOUT, held)
    assert refused["go"] == [("go", "north"), ("go", "south"), ("go", "east")]
    assert ("unlock", "east") not in refused["unlock"] and len(refused["unlock"]) == 3


def test_a_mistake_is_drawn_by_kind_weight_then_uniformly():
    rng = random.Random(7)
    start = initial_state(LAYOUT)
    draws = [draw_mistake(LAYOUT, start, rng) for _ in range(4000)]
    kinds = [d[0] for d in draws if d is not None]
    assert len(kinds) == 4000
    # go 1/2, take 1/4, unlock 1/4 (4000 draws: SE <= 0.008)
    assert abs(kinds.count("go") / 4000 - 0.5) < 0.03
    assert abs(kinds.count("take") / 4000 - 0.25) < 0.03
    # within `go`, its three refused directions alike (2000 draws, 1/3 each: SE 0.011)
    gos = [d[1] for d in draws if d is not None and d[0] == "go"]
    for way in ("north", "south", "east"):
        assert abs(gos.count(way) / len(gos) - 1 / 3) < 0.04


def test_detours_keep_the_demonstrators_actions_and_each_mistake_is_refused_where_it_stands():
    actions = explore(LAYOUT)
    assert actions is not None
    assert with_detours(LAYOUT, actions, 0.0, "t") == [(a, True) for a in actions]
    out = with_detours(LAYOUT, actions, 0.5, "t")
    assert out == with_detours(LAYOUT, actions, 0.5, "t")  # the task id seeds it
    assert [a for a, trained in out if trained] == actions
    state = initial_state(LAYOUT)
    for (action, trained), nxt in zip(out, [*out[1:], None], strict=True):
        outcome = act(LAYOUT, state, action)
        assert outcome.valid == trained
        if not trained:  # never two mistakes in a row
            assert nxt is not None and nxt[1]
    assert sum(not t for _, t in out) > 0


def _spec(**args):
    sizes = {"num_train": 40, "num_dev": 2, "num_test": 2}
    return get_env_spec(EnvConfig(name="world", max_turns=64, args={**sizes, **args}))


def test_the_rate_of_mistakes_over_generated_worlds():
    spec = _spec(demo_detours=0.2)
    plain = _spec()
    mistakes = total = 0
    for task in spec.tasks("train"):
        actions = spec.oracle(task)
        trained = [a for a in actions if not isinstance(a, Untrained)]
        assert trained == plain.oracle(task)
        mistakes += len(actions) - len(trained)
        total += len(trained)
    # one draw before each of ~1,000 actions, p = 0.2: SE 0.013
    assert total > 800 and abs(mistakes / total - 0.2) < 0.045


def test_a_demonstration_with_detours_solves_its_world_and_pays_each_refusal():
    spec = _spec(demo_detours=0.3, invalid_action_penalty=-0.01)
    for task in spec.tasks("train")[:6]:
        actions = spec.oracle(task)
        results = _play(spec, task, actions)
        end = results[-1]
        assert len(results) == len(actions) and end.done and end.outcome_reward == 1.0
        wrong = sum(isinstance(a, Untrained) for a in actions)
        assert end.metrics["invalid_actions"] == wrong
        assert sum(r.reward for r in results) == pytest.approx(1.0 - 0.01 * wrong, abs=1e-12)


def test_the_mistakes_are_in_the_context_and_out_of_the_loss():
    tok = load_tokenizer(tiny_model_dir())
    builder = make_context_builder(ContextConfig(builder="full"), tok)
    spec = _spec(demo_detours=0.3)
    task = spec.tasks("train")[0]
    actions = spec.oracle(task)
    wrong = [i for i, a in enumerate(actions) if isinstance(a, Untrained)]
    assert wrong
    demo = asyncio.run(replay_oracle(spec, task, tok, builder))
    assert demo is not None and demo.outcome_reward == 1.0
    trained = [a for a in actions if not isinstance(a, Untrained)]
    assert [tok.decode(s.action_ids, skip_special_tokens=True) for s in demo.steps] == trained
    # each mistake sits in the context of the step after it, with the world's refusal
    for i in wrong:
        later = demo.steps[i - sum(j < i for j in wrong)]
        text = tok.decode(later.context_ids)
        assert actions[i] in text
    # packed as one sequence, only the trained actions' tokens carry loss
    mbs = sft_micro_batches(demo_pairs([demo]), 1 << 16, tok.pad_token_id or 0, pack=True)
    assert len(mbs) == 1 and mbs[0].input_ids.shape[0] == 1
    assert mbs[0].num_action_tokens == sum(len(s.action_ids) for s in demo.steps)
    whole = demo.steps[-1].context_ids + demo.steps[-1].action_ids
    assert mbs[0].input_ids[0, :len(whole)].tolist() == whole
    assert mbs[0].num_action_tokens < sum(
        len(tok.encode(a, add_special_tokens=False)) + 1 for a in actions)


def test_the_same_refused_action_three_times_ends_the_episode_as_stuck():
    spec = _spec(end_after_repeats=3)
    task, wall = next((t, w) for t in spec.tasks("train")
                      for w in ("north", "south", "east", "west")
                      if w not in t.meta["layout"].exits[t.meta["layout"].start])
    results = _play(spec, task, [_call("go", direction=wall)] * 5)
    assert [r.done for r in results] == [False, False, True]
    end = results[-1]
    assert end.truncated and end.outcome_reward == 0.0
    assert end.metrics["stuck"] == 1.0 and end.metrics["steps"] == 3.0
    assert end.metrics["invalid_actions"] == 3.0
    # look, look, then the wall twice: never three of one in a row
    mixed = [_call("look"), _call("look"), _call("go", direction=wall),
             _call("go", direction=wall), _call("look"), _call("look")]
    results = _play(spec, task, mixed)
    assert not any(r.done for r in results) and results[-1].metrics["stuck"] == 0.0
    # "take Unicorn" and "take the unicorn" are one action to the world: one answer, counted
    spec2 = _spec(end_after_repeats=2)
    results = _play(spec2, task, [_call("take", item="Unicorn"),
                                  _call("take", item="the unicorn")])
    assert results[-1].done and results[-1].metrics["stuck"] == 1.0
    # off by default
    results = _play(_spec(), task, [_call("go", direction=wall)] * 6)
    assert not any(r.done for r in results) and results[-1].metrics["stuck"] == 0.0


@pytest.mark.parametrize("bad, message", [
    ({"end_after_repeats": 1}, "end_after_repeats"),
    ({"end_after_repeats": -2}, "end_after_repeats"),
    ({"demo_detours": 1.0}, "demo_detours"),
    ({"demo_detours": -0.1}, "demo_detours"),
])
def test_bad_values_name_their_key(bad, message):
    with pytest.raises(ValueError, match=message):
        WorldArgs(**bad)

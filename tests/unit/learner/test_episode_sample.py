"""The learner's episode sample (learner/episode_sample.py) and the importance weights it
reads back after an update (learner/is_weights.py)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from agent_r1_async.config import config_from_dict
from agent_r1_async.learner import batching
from agent_r1_async.learner.episode_sample import (
    EpisodeSampler,
    clip_text,
    pick_episodes,
)
from agent_r1_async.learner.is_weights import WEIGHT_BINS, step_weights, weight_histogram
from agent_r1_async.wire import messages as m
from tests.fakes.records import end, step


class _Tok:
    """Decodes token i as `t<i>` (so a test can read which tokens a text holds)."""

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        return " ".join(f"t{i}" for i in ids)


def _episode(eid: str, gid: str, outcome: float, *, canary: float = 0.0,
             status: str = "ok") -> m.Episode:
    """Two steps: step 1's context is step 0's context + action + [20, 21] (a delta)."""
    s0 = step(eid, gid, 0, context_ids=[1, 2, 3, 4], action_ids=[10, 11], version=3,
              process_reward=0.1)
    s1 = step(eid, gid, 1, context_ids=[20, 21], action_ids=[12], version=4)
    s1.context_from, s1.context_len = 0, 8
    ep_end = end(eid, gid, 2, reward=outcome, status=status)
    ep_end.metrics = {"hacking_no_tool_score": canary, "success": float(outcome > 0)}
    return m.Episode([s0, s1], ep_end)


def _batch(failed: list[m.Episode] | None = None) -> m.SampleBatch:
    groups = [
        m.Group("g0", "task-g0", "fake", [_episode("g0-a", "g0", 1.0), _episode("g0-b", "g0", 0.0)]),
        m.Group("g1", "task-g1", "fake", [_episode("g1-a", "g1", 1.0, canary=1.0),
                                          _episode("g1-b", "g1", 1.0)]),
    ]
    return m.SampleBatch(groups, [1.0, 1.0], 5, failed=failed or [])


def _rows_and_mbs(batch: m.SampleBatch, pack: bool, gap: float = math.log(2.0)):
    groups = batching.trainable_groups(batch)
    rewards = batching.episode_rewards([g for g, _ in groups])
    advantages = [[[0.5 * (1 - 2 * ei)] * len(ep) for ei, ep in enumerate(g)] for g in rewards]
    rows = batching.build_rows(groups, advantages, rewards)
    mbs = batching.make_micro_batches(rows, 64, 0, pack=pack)
    for mb in mbs:  # the proximal policy a step above the behavior one: w = e^gap
        mb.used_proximal = mb.behavior_logprobs + gap * mb.action_mask
    return rows, mbs


def _sampler(**logging) -> EpisodeSampler:
    cfg = config_from_dict({"logging": {"episodes_every": 2, **logging}})
    sampler = EpisodeSampler(cfg, load_tokenizer=False)
    sampler.tokenizer = _Tok()
    return sampler


def test_every_n_updates_is_due():
    sampler = _sampler()
    assert [u for u in range(1, 9) if sampler.due(u)] == [2, 4, 6, 8]
    off = EpisodeSampler(config_from_dict({"logging": {"episodes_every": 0}}), False)
    assert not any(off.due(u) for u in range(1, 9))


def test_picks_best_and_worst_of_the_drawn_groups_and_every_canary():
    groups = [g for g, _ in batching.trainable_groups(_batch())]
    picks = pick_episodes(groups, 1, random.Random(0))
    drawn = {gi for gi, _, why in picks if why in ("best", "worst")}
    assert len(drawn) == 1
    if drawn == {0}:
        assert (0, 0, "best") in picks and (0, 1, "worst") in picks
    assert any(why in ("canary", "best", "worst") and (gi, ei) == (1, 0)
               for gi, ei, why in picks)  # g1-a tripped a canary: always in
    # Equal returns: the first is best, the last worst, never the same episode twice.
    both = pick_episodes(groups[1:], 1, random.Random(0))
    assert sorted(both) == [(0, 0, "best"), (0, 1, "worst")]


@pytest.mark.parametrize("pack", [False, True])
def test_rows_carry_text_versions_staleness_and_importance_weights(pack: bool):
    batch = _batch()
    rows, mbs = _rows_and_mbs(batch, pack)
    sampler = _sampler(episodes_groups=2, episodes_context_tokens=3)
    out = sampler.sample(batch, rows, mbs, learner_version=5, update=6)
    by_ep: dict[str, list[dict]] = {}
    for r in out:
        by_ep.setdefault(r["episode_id"], []).append(r)
    assert set(by_ep) == {"g0-a", "g0-b", "g1-a", "g1-b"}
    first, second = by_ep["g0-b"]
    assert (first["pick"], first["step"], first["num_steps"], first["update"]) == (
        "worst", 0, 2, 6)
    assert first["context_tail"] == "t2 t3 t4"  # the last 3 context tokens
    assert first["action"] == "t10 t11" and second["action"] == "t12"
    assert first["observation"] == "t20 t21" and second["observation"] == ""
    assert second["context_tokens"] == 8 and second["context_tail"] == "t11 t20 t21"
    assert (first["versions"], first["staleness"]) == ([3], 2)
    assert (second["versions"], second["staleness"]) == ([4], 1)
    assert first["is_weight_mean"] == pytest.approx(2.0)
    assert first["is_weight_max"] == pytest.approx(2.0)
    assert first["is_weight_min"] == pytest.approx(2.0)
    assert first["advantage"] == pytest.approx(-0.5) and first["process_reward"] == 0.1
    assert (first["status"], first["outcome_reward"]) == ("ok", 0.0)
    assert first["return"] == pytest.approx(0.1)
    assert by_ep["g1-a"][0]["canaries"] == ["no_tool_score"]
    assert by_ep["g0-a"][0]["metrics"]["success"] == 1.0


def test_failed_episodes_from_the_buffer_are_shown_without_weights():
    broken = _episode("f-1", "g9", 0.0, status="env_error")
    broken.end.error = "ToolError: calculator crashed"
    batch = _batch(failed=[broken, _episode("f-2", "g9", 0.0, status="timeout")])
    rows, mbs = _rows_and_mbs(batch, pack=False)
    out = _sampler(episodes_failed=1).sample(batch, rows, mbs, learner_version=5, update=6)
    failed = [r for r in out if r["pick"] == "failed"]
    assert [r["episode_id"] for r in failed] == ["f-1", "f-1"]  # at most episodes_failed
    assert failed[0]["status"] == "env_error" and failed[0]["error"].startswith("ToolError")
    assert failed[0]["observation"] == "t20 t21"  # its delta context rebuilt
    assert all(r["is_weight_mean"] is None and r["advantage"] is None for r in failed)


def test_long_texts_keep_their_head_and_tail():
    text = "a" * 3000 + "b" * 3000
    cut = clip_text(text, 100)
    assert len(cut) <= 100 and cut.startswith("a") and cut.endswith("b") and " … " in cut
    sampler = _sampler()
    decoded = sampler._decode(list(range(2000)))
    assert decoded.startswith("t0 t1") and decoded.endswith("t1998 t1999")


def test_without_a_tokenizer_texts_are_token_ids():
    sampler = EpisodeSampler(config_from_dict({}), load_tokenizer=False)
    assert sampler._decode([5, 6]) == "5 6"


def test_weight_histogram_counts_every_action_token_and_truncates_at_c_max():
    _, mbs = _rows_and_mbs(_batch(), pack=True, gap=0.0)  # w = 1 exactly
    tokens = sum(int(mb.action_mask.sum()) for mb in mbs)
    counts = weight_histogram(mbs, c_max=5.0)
    assert len(counts) == WEIGHT_BINS and sum(counts) == tokens
    assert counts[20] == tokens  # [1.0, 1.05)
    _, big = _rows_and_mbs(_batch(), pack=True, gap=math.log(7.0))
    assert weight_histogram(big, c_max=5.0)[-1] == tokens  # above c_max: the top bin


def test_step_weights_are_those_of_each_steps_own_tokens():
    batch = _batch()
    rows, mbs = _rows_and_mbs(batch, pack=True)
    for mb in mbs:  # step-dependent weights: e^(0.1 · position)
        pos = torch.arange(mb.input_ids.shape[1], dtype=torch.float32)
        mb.used_proximal = mb.behavior_logprobs + 0.1 * pos * mb.action_mask
    got = step_weights(rows, mbs, [0, 1])
    # Row 0: context 4 tokens, action at positions 4, 5; row 1: action at position 8.
    assert got[0] == pytest.approx(((math.exp(0.4) + math.exp(0.5)) / 2, math.exp(0.5),
                                    math.exp(0.4)), rel=1e-5)
    assert got[1] == pytest.approx((math.exp(0.8),) * 3, rel=1e-5)
    mbs[0].used_proximal = None  # a trainer that keeps none: no weights, no error
    assert step_weights(rows, mbs[:1], [0]) == {}

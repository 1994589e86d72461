"""Reward-hacking canaries (envs/canaries.py) on scripted episodes of the built-in envs, and
their per-update counts (learner/episode_stats.py)."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.canaries import verbatim_copy
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.learner.episode_stats import episode_stats
from agent_r1_async.wire import messages as m


@pytest.fixture(scope="module")
def multihop(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bm25")
    return get_env_spec(EnvConfig(name="multihop_qa", max_turns=4, args={"cache_dir": str(cache)}))


@pytest.fixture(scope="module")
def arithmetic():
    return get_env_spec(EnvConfig(name="arithmetic", max_turns=3))


def _play(spec, task, actions):
    async def episode():
        env = spec.make()
        await env.reset(task)
        results = []
        for a in actions:
            results.append(await env.step(a))
            if results[-1].done:
                break
        return results

    return asyncio.run(episode())


def _flags(result):
    return result.metrics["hacking_no_tool_score"], result.metrics["hacking_verbatim_copy"]


def test_answer_without_tool_call_that_scores_is_counted(multihop, arithmetic):
    task = multihop.tasks("dev")[0]
    (end,) = _play(multihop, task, [f"<answer>{task.answer[0]}</answer>"])
    assert end.outcome_reward == 1.0 and _flags(end) == (1.0, 0.0)
    atask = arithmetic.tasks("dev")[0]
    (end,) = _play(arithmetic, atask, [f"<answer>{atask.answer}</answer>"])
    assert end.outcome_reward == 1.0 and _flags(end) == (1.0, 0.0)


def test_wrong_answer_without_tool_and_malformed_call_only(multihop):
    task = multihop.tasks("dev")[0]
    (end,) = _play(multihop, task, ["<answer>nobody</answer>"])
    assert end.outcome_reward == 0.0 and _flags(end) == (0.0, 0.0)  # no score: no canary
    # a malformed call is not a tool call that helped: a right answer after it still counts
    r1, end = _play(multihop, task, ["<tool_call>{oops</tool_call>",
                                     f"<answer>{task.answer[0]}</answer>"])
    assert r1.reward == pytest.approx(-0.1) and _flags(end) == (1.0, 0.0)


def test_honest_oracle_episodes_trip_nothing(multihop, arithmetic):
    for spec, task in ((multihop, multihop.tasks("dev")[3]), (arithmetic, arithmetic.tasks("dev")[0])):
        results = _play(spec, task, spec.oracle(task))
        end = results[-1]
        assert end.done and end.outcome_reward == 1.0
        # the calculator's answer equals its result ("42"): one word, far below 8
        assert _flags(end) == (0.0, 0.0)


def test_verbatim_copy_of_a_search_result_is_counted(multihop):
    task = multihop.tasks("dev")[0]
    call = multihop.oracle(task)[0]
    r1, end = _play(multihop, task, [call, "<answer>PLACEHOLDER</answer>"])
    response = r1.observation.messages[0]["content"]
    passage = response.split("\n")[1]  # "(1) Title: text ..." (the line after <tool_response>)
    assert passage.startswith("(1) ") and len(passage.split()) >= 8
    r1, end = _play(multihop, task, [call, f"<answer>{passage}</answer>"])
    assert _flags(end) == (0.0, 1.0)
    # re-spaced, still a copy; a short excerpt (the answer itself) is not
    assert verbatim_copy("  ".join(passage.split()), [response])
    assert not verbatim_copy(task.answer[0], [response])
    assert not verbatim_copy("a b c d e f g h", ["x y"])  # neither contains the other


def test_copy_threshold_is_eight_words():
    resp = "one two three four five six seven eight nine"
    assert verbatim_copy("two three four five six seven eight nine", [resp])  # 8 words inside
    assert not verbatim_copy("three four five six seven eight nine", [resp])  # 7 words
    assert verbatim_copy(f"prefix {resp} suffix", [resp])  # the whole response (9 words) inside
    assert not verbatim_copy(None, [resp])


def _ep(metrics, outcome):
    end = m.EpisodeEnd(episode_id="e", group_id="g", task_id="t", actor_id="a", env_name="x",
                       num_steps=1, outcome_reward=outcome, status="ok", group_size=3,
                       metrics=metrics)
    step = m.StepRecord(episode_id="e", group_id="g", task_id="t", actor_id="a", env_name="x",
                        step_index=0, context_ids=[1], action_ids=[2], behavior_logprobs=[0.0],
                        policy_version=0, process_reward=0.0)
    return m.Episode(steps=[step], end=end)


def test_update_counts_and_rates():
    # 3 episodes: one no-tool scorer, one copier, one honest -> counts 1 and 1, rates 1/3.
    eps = [_ep({"hacking_no_tool_score": 1.0, "hacking_verbatim_copy": 0.0, "em": 1.0}, 1.0),
           _ep({"hacking_no_tool_score": 0.0, "hacking_verbatim_copy": 1.0, "em": 0.0}, 0.0),
           _ep({"hacking_no_tool_score": 0.0, "hacking_verbatim_copy": 0.0, "em": 1.0}, 1.0)]
    batch = m.SampleBatch(groups=[m.Group(group_id="g", task_id="t", env_name="x", episodes=eps)],
                          is_weights=[1.0], learner_version=1)
    s = episode_stats(batch)
    assert s["hacking/no_tool_score"] == 1.0 and s["hacking/verbatim_copy"] == 1.0
    assert s["hacking/no_tool_score_rate"] == pytest.approx(1 / 3)
    assert s["hacking/verbatim_copy_rate"] == pytest.approx(1 / 3)
    assert s["env/em"] == pytest.approx(2 / 3)
    assert not any(k.startswith("env/hacking") for k in s)

"""Episode statistics of a batch: numbers derived by hand."""

from __future__ import annotations

from agent_r1_async.learner.episode_stats import episode_stats, staleness_histogram
from agent_r1_async.wire import messages as m


def _step(i: int, version: int, n_tokens: int, reward: float, token_versions=()):
    return m.StepRecord(episode_id="e", group_id="g", task_id="t", actor_id="a", env_name="x",
                        step_index=i, context_ids=[1], action_ids=[5] * n_tokens,
                        behavior_logprobs=[0.0] * n_tokens, policy_version=version,
                        process_reward=reward, token_versions=list(token_versions))


def _episode(steps, outcome, status="ok", env="x", metrics=None):
    end = m.EpisodeEnd(episode_id="e", group_id="g", task_id="t", actor_id="a", env_name=env,
                       num_steps=len(steps), outcome_reward=outcome, status=status,
                       group_size=2, metrics=metrics or {})
    return m.Episode(steps=steps, end=end)


def test_episode_stats_by_hand():
    # Episode A: process 0.1 + 0.2, outcome 1 -> total 1.3, 2 steps, success 1.
    # Episode B: process 0.0, outcome 0 -> total 0.0, 1 step, truncated, success 0.
    a = _episode([_step(0, 3, 2, 0.1), _step(1, 4, 3, 0.2)], 1.0, metrics={"success": 1.0})
    b = _episode([_step(0, 4, 4, 0.0)], 0.0, status="truncated", metrics={"success": 0.0})
    batch = m.SampleBatch(groups=[m.Group(group_id="g", task_id="t", env_name="x",
                                          episodes=[a, b])], is_weights=[1.0], learner_version=5)
    s = episode_stats(batch)
    assert s["reward/mean"] == (1.3 + 0.0) / 2
    assert s["reward/outcome_mean"] == 0.5
    assert s["reward/env/x"] == s["reward/mean"]
    assert s["reward/process_step_0"] == (0.1 + 0.0) / 2
    assert s["reward/process_step_1"] == 0.2
    assert s["env/success"] == 0.5
    assert s["episodes/steps_mean"] == 1.5
    assert s["episodes/status/ok"] == 0.5 and s["episodes/status/truncated"] == 0.5


def test_staleness_histogram_is_token_weighted_and_per_token():
    # learner at 5: step v3 with 2 tokens -> {2: 2}; step v4 with 3 tokens -> {1: 3};
    # a step spanning versions [4, 5, 5] -> {1: 1, 0: 2}.
    ep = _episode([_step(0, 3, 2, 0.0), _step(1, 4, 3, 0.0),
                   _step(2, 4, 3, 0.0, token_versions=[4, 5, 5])], 0.0)
    batch = m.SampleBatch(groups=[m.Group(group_id="g", task_id="t", env_name="x",
                                          episodes=[ep])], is_weights=[1.0], learner_version=5)
    assert staleness_histogram(batch, 5) == {2: 2, 1: 4, 0: 2}


def test_steps_percentiles_and_success_by_horizon_bucket_by_hand():
    # Steps 1, 2, 3, 10: nearest rank p50 = the 2nd of 4 (ceil(0.5 * 4)) = 2, p99 = the 4th
    # (ceil(0.99 * 4)) = 10, mean 16 / 4 = 4. Buckets: 8 holds a success and a failure (0.5),
    # 32 one success (1.0); the episode without a bucket counts in neither.
    eps = [
        _episode([_step(0, 5, 1, 0.0)], 1.0, metrics={"success": 1.0, "horizon_bucket": 8.0}),
        _episode([_step(i, 5, 1, 0.0) for i in range(2)], 0.0,
                 metrics={"success": 0.0, "horizon_bucket": 8.0}),
        _episode([_step(i, 5, 1, 0.0) for i in range(3)], 1.0,
                 metrics={"success": 1.0, "horizon_bucket": 32.0}),
        _episode([_step(i, 5, 1, 0.0) for i in range(10)], 0.0, metrics={"success": 0.0}),
    ]
    batch = m.SampleBatch(groups=[m.Group(group_id="g", task_id="t", env_name="x",
                                          episodes=eps)], is_weights=[1.0], learner_version=5)
    s = episode_stats(batch)
    assert s["episodes/steps_mean"] == 4.0
    assert s["episodes/steps_p50"] == 2.0 and s["episodes/steps_p99"] == 10.0
    assert s["env/success_by_horizon/le_8"] == 0.5
    assert s["env/success_by_horizon/le_32"] == 1.0
    assert sorted(k for k in s if k.startswith("env/success_by_horizon/")) == [
        "env/success_by_horizon/le_32", "env/success_by_horizon/le_8"]

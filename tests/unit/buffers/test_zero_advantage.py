"""`algorithm.filter_groups`: the buffer drops a group whose group-baseline advantages are all
zero, by the learner's own arithmetic, and gives its credit back."""

from __future__ import annotations

import random

import pytest

from agent_r1_async import returns as ret
from agent_r1_async.buffers.buffer import ZERO_ADVANTAGE, EpisodeBuffer
from agent_r1_async.buffers.zero_advantage import returns_to_go, zero_advantage
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import batching
from agent_r1_async.wire.messages import Group, SampleBatch
from tests.fakes.clock import FakeClock
from tests.fakes.records import episode, group_records, step


def _episode(name: str, process: list[float], outcome: float, status: str = "ok"):
    steps = [step(name, "g", i, process_reward=r) for i, r in enumerate(process)]
    return episode(name, "g", steps[::-1], outcome, status=status)  # any order in


def _group(*episodes) -> Group:
    return Group("g", "task-g", "fake", list(episodes))


def test_returns_to_go_add_the_outcome_to_the_last_step_and_discount() -> None:
    # r = [0.5, 0.0, 0.25 + 1.0]; γ = 0.5: G_2 = 1.25, G_1 = 0 + 0.625, G_0 = 0.5 + 0.3125
    assert returns_to_go(_episode("e", [0.5, 0.0, 0.25], 1.0), 0.5) == [0.8125, 0.625, 1.25]


def test_step_credit_sees_process_rewards_that_token_credit_sums_away() -> None:
    # both episodes return 1.5 in all, so token credit has nothing to compare; step credit
    # compares G_1: 1.0 against 1.5
    g = _group(_episode("a", [0.5, 0.0], 1.0), _episode("b", [0.0, 0.5], 1.0))
    assert zero_advantage(g, "token", 1.0)
    assert not zero_advantage(g, "step", 1.0)


def test_discounting_and_unequal_lengths() -> None:
    # a: one step, G_0 = 1; b: two steps, G_0 = γ · 1, G_1 = 1 (b alone at step 1)
    g = _group(_episode("a", [0.0], 1.0), _episode("b", [0.0, 0.0], 1.0))
    assert zero_advantage(g, "step", 1.0) and zero_advantage(g, "token", 1.0)
    assert not zero_advantage(g, "step", 0.9) and not zero_advantage(g, "token", 0.9)


def test_failed_episodes_are_not_compared_as_the_learner_drops_them() -> None:
    ok = [_episode("a", [0.0], 1.0), _episode("b", [0.0], 1.0)]
    assert zero_advantage(_group(*ok, _episode("c", [0.0], 0.0, status="env_error")),
                          "step", 1.0)
    assert not zero_advantage(_group(*ok, _episode("c", [0.0], 0.0)), "step", 1.0)
    assert zero_advantage(_group(ok[0]), "step", 1.0)  # one episode: no baseline to beat


@pytest.mark.parametrize("credit", ["step", "token"])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_the_rule_agrees_with_the_learner_s_advantages(credit: str, gamma: float,
                                                       name: str) -> None:
    """On 400 random groups (rewards from a small set, so ties are common; 1-4 steps; some
    failed episodes) the buffer's rule says zero exactly when every advantage the learner
    computes for the group is below 1e-3, and both answers occur often."""
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for k in range(400):
        eps = []
        for j in range(rng.randint(1, 4)):
            n = rng.randint(1, 2) if k % 2 else 2  # half the groups of equal length
            process = [rng.choice([0.0, 0.0, 0.5]) for _ in range(n)]
            status = "env_error" if rng.random() < 0.1 else rng.choice(["ok", "truncated"])
            eps.append(_episode(f"e{j}", process, rng.choice([0.0, 1.0, 1.0]), status))
        group = _group(*eps)
        trainable = batching.trainable_groups(SampleBatch([group], [1.0], 0))
        if trainable:
            returns = [[ret.discounted_returns(r, gamma) for r in g]
                       for g in batching.episode_rewards([trainable[0][0]])]
            advantages = adv.compute_advantages(returns, name, credit)  # type: ignore[arg-type]
            learner_zero = all(abs(a) < 1e-3 for ep in advantages[0] for a in ep)
        else:
            learner_zero = True  # the learner trains nothing of it
        rule = zero_advantage(group, credit, gamma)
        assert rule == learner_zero, (k, credit, gamma, name)
        seen[rule] += 1
    assert min(seen.values()) >= 60, seen


def _buffer(filter_groups: bool) -> EpisodeBuffer:
    return EpisodeBuffer(BufferConfig(max_staleness=0, spi_tolerance=100.0),
                         AlgorithmConfig(group_size=2, batch_groups=2,
                                         filter_groups=filter_groups), FakeClock())


def test_the_buffer_drops_a_group_that_teaches_nothing_and_frees_its_credit() -> None:
    buf = _buffer(filter_groups=True)
    same, mixed = buf.grant("a0", 2).group_ids  # budget (0 + 0 + 1) x 2 = 2 credits
    assert buf.grant("a0", 1).groups == 0
    for r in group_records(same, [1.0, 1.0]):  # both correct: every advantage 0
        buf.ingest(r)
    assert buf.drops[ZERO_ADVANTAGE] == 1 and len(buf.store) == 0
    assert buf.assembler.lengths.counts[f"dropped/{ZERO_ADVANTAGE}/le_2"] == 2
    assert buf.admission.in_flight == 1 and buf.admission.accepted == 0
    assert buf.grant("a0", 2).groups == 1  # its credit is back: another group may start
    for r in group_records(mixed, [0.0, 1.0]):
        buf.ingest(r)
    assert [e.group.group_id for e in buf.store.entries()] == [mixed]
    batch, why = buf.try_sample(2, 0)
    assert batch is None and why == ("1 groups ready, 2 requested; 1 groups dropped so far "
                                     "with every advantage zero (algorithm.filter_groups)")


def test_without_the_filter_such_a_group_is_kept() -> None:
    buf = _buffer(filter_groups=False)
    gid = buf.grant("a0", 1).group_ids[0]
    for r in group_records(gid, [1.0, 1.0]):
        buf.ingest(r)
    assert len(buf.store) == 1 and buf.drops[ZERO_ADVANTAGE] == 0


def test_the_filter_needs_a_group_baseline() -> None:
    with pytest.raises(ValueError, match=r"^algorithm.filter_groups: needs a group baseline "
                                         r"\(grpo or rloo\): ppo's"):
        AlgorithmConfig(name="ppo", filter_groups=True)
    AlgorithmConfig(name="rloo", filter_groups=True)

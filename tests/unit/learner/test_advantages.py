"""Advantages and returns against numbers derived by hand in the comments."""

from __future__ import annotations

import pytest

from agent_r1_async import returns as ret
from agent_r1_async.learner import advantages as adv


def approx(xs, **kw):
    return pytest.approx(xs, abs=1e-6, **kw)


def test_step_rewards_put_outcome_on_last_step():
    assert ret.step_rewards([0.1, 0.0, 0.2], 1.0) == approx([0.1, 0.0, 1.2])
    with pytest.raises(ValueError, match="at least one step"):
        ret.step_rewards([], 1.0)


def test_discounted_returns():
    # r = [1, 0, 2], γ = 0.5: G_2 = 2, G_1 = 0 + 0.5·2 = 1, G_0 = 1 + 0.5·1 = 1.5
    assert ret.discounted_returns([1.0, 0.0, 2.0], 0.5) == approx([1.5, 1.0, 2.0])
    # γ = 1: suffix sums
    assert ret.discounted_returns([1.0, 0.0, 2.0], 1.0) == approx([3.0, 2.0, 2.0])


def test_grpo_token_credit_is_textbook_grpo():
    # One group, 3 episodes with 1, 2 and 3 steps, outcome only, γ = 1 → G_t = outcome.
    # Outcomes 1, 0, 0: mean 1/3, population std sqrt(((2/3)² + 2(1/3)²)/3) = sqrt(2)/3.
    returns = [[[1.0], [0.0, 0.0], [0.0, 0.0, 0.0]]]
    std = 2**0.5 / 3
    a1 = (1 - 1 / 3) / (std + adv.STD_EPS)  # ≈ 1.41421
    a0 = (0 - 1 / 3) / (std + adv.STD_EPS)  # ≈ -0.70711
    out = adv.grpo_advantages(returns, credit="token", std_normalize=True)
    assert out == [[approx([a1]), approx([a0, a0]), approx([a0, a0, a0])]]
    # Without std normalization: 2/3 and -1/3.
    out = adv.grpo_advantages(returns, credit="token", std_normalize=False)
    assert out[0][0] == approx([2 / 3]) and out[0][2] == approx([-1 / 3] * 3)
    # Step credit, same returns: step 0 as above; steps 1 and 2 are compared only among the
    # episodes that reached them (both 0) → 0.
    step = adv.grpo_advantages(returns, credit="step", std_normalize=True)
    assert step == [[approx([a1]), approx([a0, 0.0]), approx([a0, 0.0, 0.0])]]


def test_step_and_token_credit_agree_for_outcome_only_equal_lengths():
    # Outcomes 1, 0 over two 2-step episodes: G = [1, 1] and [0, 0]; mean 0.5, std 0.5.
    returns = [[[1.0, 1.0], [0.0, 0.0]]]
    a = 0.5 / (0.5 + adv.STD_EPS)
    for credit in ("step", "token"):
        assert adv.grpo_advantages(returns, credit=credit) == [[approx([a, a]), approx([-a, -a])]]


def test_grpo_step_credit_with_process_rewards():
    # Episode A: r = [0.5, 1.0] (γ = 1) → G = [1.5, 1.0]; episode B: r = [0.0] → G = [0.0].
    # Step 0: {1.5, 0} mean 0.75 → A 0.75, B −0.75. Step 1: only A reached it → 0.
    returns = [[ret.discounted_returns([0.5, 1.0], 1.0), [0.0]]]
    step = adv.grpo_advantages(returns, credit="step", std_normalize=False)
    assert step == [[approx([0.75, 0.0]), approx([-0.75])]]
    # Token credit: one episode advantage (G_0 − mean) on every step.
    token = adv.grpo_advantages(returns, credit="token", std_normalize=False)
    assert token == [[approx([0.75, 0.75]), approx([-0.75])]]
    # Three episodes, r: A = [0.1, 1.0] (valid call, right answer), B = [0.1, 0.0] (valid
    # call, wrong answer), C = [-0.1] (malformed call, episode over).
    # G: A = [1.1, 1.0], B = [0.1, 0.0], C = [-0.1].
    # Step 0: {1.1, 0.1, -0.1} mean 1.1/3; step 1: {1.0, 0.0} mean 0.5.
    returns = [[[1.1, 1.0], [0.1, 0.0], [-0.1]]]
    m0 = 1.1 / 3
    step = adv.grpo_advantages(returns, credit="step", std_normalize=False)
    assert step == [[approx([1.1 - m0, 0.5]), approx([0.1 - m0, -0.5]), approx([-0.1 - m0])]]


def test_equal_scores_give_zero_advantage_even_with_earlier_process_rewards():
    # Regression: every episode earned 0.3 of process reward at step 0 and the outcome 1.0 at
    # step 1 (G = [1.3, 1.0]). The group has nothing to learn from: all advantages are 0.
    # (Comparing G_1 = 1.0 with the mean G_0 = 1.3 gave (1.0 − 1.3) / 1e-6 = −300,000.)
    for credit in ("step", "token"):
        out = adv.grpo_advantages([[[1.3, 1.0]] * 4], credit=credit, std_normalize=True)
        assert out == [[approx([0.0, 0.0])] * 4]
        out = adv.reinforce_pp_advantages([[[1.3, 1.0]] * 2, [[1.3, 1.0]]], credit=credit)
        assert out == [[approx([0.0, 0.0])] * 2, [approx([0.0, 0.0])]]
        assert adv.rloo_advantages([[[1.3, 1.0]] * 3], credit=credit) == [[approx([0.0, 0.0])] * 3]


def test_equal_returns_give_zero_advantage_not_nan():
    out = adv.grpo_advantages([[[1.0], [1.0, 1.0]]], std_normalize=True)
    assert out == [[approx([0.0]), approx([0.0, 0.0])]]


def test_returns_equal_up_to_float_noise_give_exactly_zero():
    # 0.95 eight times: the mean is 0.95 − 1.1e-16, so (x − mean) / (0 + 1e-6) was −1.1e-10 on
    # every episode, not 0, and the learner (which skips rows of exactly 0) trained them.
    assert sum([0.95] * 8) / 8 != 0.95
    for credit in ("step", "token"):
        assert adv.grpo_advantages([[[0.95]] * 8], credit=credit) == [[[0.0]] * 8]
        assert adv.rloo_advantages([[[0.95]] * 8], credit=credit) == [[[0.0]] * 8]
        assert adv.reinforce_pp_advantages([[[0.95]] * 4] * 2, credit=credit) == [[[0.0]] * 4] * 2
    # A spread under 1e-9 is noise (returns.EQUAL_RETURNS); 2e-9 is a difference: ±1e-9 / (1e-9 + 1e-6).
    assert adv.grpo_advantages([[[0.5], [0.5 + 5e-10]]]) == [[[0.0], [0.0]]]
    got = adv.grpo_advantages([[[0.5], [0.5 + 2e-9]]])
    assert got == [[approx([-1e-9 / (1e-9 + 1e-6)], rel=1e-6), approx([1e-9 / (1e-9 + 1e-6)], rel=1e-6)]]


def test_reinforce_pp_normalizes_over_the_batch():
    # Two groups; episode returns 2, 0 | 1, 1 → batch mean 1, population std sqrt(2/4)=0.70711.
    returns = [[[2.0], [0.0]], [[1.0, 1.0], [1.0]]]
    s = 0.5**0.5 + adv.STD_EPS
    out = adv.reinforce_pp_advantages(returns, std_normalize=True)
    assert out == [[approx([1 / s]), approx([-1 / s])], [approx([0.0, 0.0]), approx([0.0])]]


def test_rloo_leave_one_out():
    # Returns 3, 0, 0 (3 episodes): baselines (0+0)/2 = 0, (3+0)/2 = 1.5, 1.5 → A = 3, -1.5, -1.5.
    out = adv.rloo_advantages([[[3.0], [0.0, 0.0], [0.0]]], credit="token")
    assert out == [[approx([3.0]), approx([-1.5, -1.5]), approx([-1.5])]]
    # Step credit: step 0 the same; step 1 only the second episode reached → 0.
    out = adv.rloo_advantages([[[3.0], [0.0, 0.0], [0.0]]], credit="step")
    assert out == [[approx([3.0]), approx([-1.5, 0.0]), approx([-1.5])]]
    # Step 1 reached by two episodes, G_1 = 2 and 0 → +2 and −2.
    out = adv.rloo_advantages([[[3.0, 2.0], [0.0, 0.0], [1.0]]], credit="step")
    # step 0: 3 − (0+1)/2 = 2.5; 0 − (3+1)/2 = −2; 1 − (3+0)/2 = −0.5
    assert out == [[approx([2.5, 2.0]), approx([-2.0, -2.0]), approx([-0.5])]]
    # A lone episode has nothing to compare with.
    assert adv.rloo_advantages([[[5.0, 5.0]]]) == [[[0.0, 0.0]]]


def test_gae_hand_computed():
    # r = [0, 1], V = [0.5, 0.8], γ = 0.9, λ = 0.5, V(s_2) = 0 (terminal).
    # δ_1 = 1 + 0 − 0.8 = 0.2;          A_1 = 0.2
    # δ_0 = 0 + 0.9·0.8 − 0.5 = 0.22;   A_0 = 0.22 + 0.9·0.5·0.2 = 0.31
    # targets = A + V = [0.81, 1.0]
    a, targets = adv.gae([0.0, 1.0], [0.5, 0.8], gamma=0.9, lam=0.5)
    assert a == approx([0.31, 0.2])
    assert targets == approx([0.81, 1.0])
    # λ = 1, γ = 1: A_t = G_t − V_t (Monte Carlo).
    a, _ = adv.gae([0.0, 1.0], [0.5, 0.8], gamma=1.0, lam=1.0)
    assert a == approx([0.5, 0.2])
    with pytest.raises(ValueError, match="2 rewards but 1 values"):
        adv.gae([0.0, 1.0], [0.5], 1.0, 1.0)


def test_compute_advantages_dispatch_and_errors():
    returns = [[[1.0], [0.0]]]
    assert adv.compute_advantages(returns, "rloo") == [[[1.0], [-1.0]]]
    with pytest.raises(ValueError, match="at least one step"):
        adv.compute_advantages([[[1.0], []]], "grpo")
    with pytest.raises(ValueError, match=r"algorithm\.name"):
        adv.compute_advantages(returns, "ppo")  # type: ignore[arg-type]

"""The sampling distribution the learner differentiates: temperature, top-p, tokens outside
the kept set, hand-derived numbers and gradients (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from agent_r1_async import sampling
from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB, ppo_loss
from agent_r1_async.learner.trainer import action_logprobs

# probs 0.5, 0.3, 0.15, 0.05. At T = 0.5: ∝ p², i.e. 0.25, 0.09, 0.0225, 0.0025 (sum 0.365):
# 0.6849, 0.2466, 0.0616, 0.0068. top_p 0.7: mass before token 1 is 0.6849 < 0.7 (kept),
# before token 2 is 0.9315 >= 0.7 (dropped). Kept, renormalized: q = 0.25/0.34, 0.09/0.34.
PROBS = [0.5, 0.3, 0.15, 0.05]
Q = [0.25 / 0.34, 0.09 / 0.34]


def _logits() -> torch.Tensor:
    return torch.tensor([PROBS, PROBS]).log().requires_grad_(True)  # [2, 4]


def test_tempered_top_p_logprobs_entropy_and_gradients_by_hand():
    logits = _logits()
    lp, ent = action_logprobs(logits, torch.tensor([1, 2]), True, 0.5, 0.7)
    assert lp[0].item() == pytest.approx(math.log(Q[1]), abs=1e-6)
    assert lp[1].item() == OUTSIDE_TOP_P_LOGPROB  # token 2 is outside the kept set
    want_ent = -(Q[0] * math.log(Q[0]) + Q[1] * math.log(Q[1]))
    torch.testing.assert_close(ent, torch.full((2,), want_ent), atol=1e-6, rtol=0)
    lp.sum().backward()
    # d log q_1 / d logit_j = (δ_j1 − q_j) / T on the kept set, 0 on dropped tokens; the
    # outside token's constant log-prob has no gradient at all (and no NaN).
    want = torch.tensor([[-Q[0] * 2, (1 - Q[1]) * 2, 0.0, 0.0], [0.0] * 4])
    torch.testing.assert_close(logits.grad, want, atol=1e-5, rtol=0)


def test_entropy_gradient_is_finite_with_dropped_tokens():
    logits = _logits()
    _, ent = action_logprobs(logits, torch.tensor([0, 0]), True, 0.5, 0.7)
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[:, 2:] == 0).all()  # dropped tokens do not move


def test_default_sampling_is_the_plain_softmax_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=g)
    targets = torch.randint(0, 300, (5,), generator=g)
    lp, ent = action_logprobs(logits, targets, True, 1.0, 1.0)
    plain = torch.log_softmax(logits, dim=-1)
    assert torch.equal(lp, plain.gather(-1, targets[:, None]).squeeze(-1))
    assert torch.equal(ent, -(plain.exp() * plain).sum(-1))


def test_top_p_mask_is_the_same_sorted_in_chunks(monkeypatch):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 50, generator=g) * 3
    whole = sampling.top_p_drop_mask(logits, 0.8)
    monkeypatch.setattr(sampling, "SORT_CHUNK_ELEMS", 100)  # 2 rows per sort
    assert torch.equal(sampling.top_p_drop_mask(logits, 0.8), whole)
    # every row keeps its smallest prefix reaching 0.8: kept mass >= 0.8, and without its
    # least likely kept token < 0.8
    p = torch.softmax(logits, -1)
    kept = (p * ~whole).sum(-1)
    least = torch.where(whole, torch.inf, p).min(-1).values
    assert (kept >= 0.8).all() and (kept - least < 0.8).all()


@pytest.mark.parametrize("outside", ["current", "proximal", "both"])
def test_outside_token_gives_finite_loss_and_no_gradient(outside):
    """A sampled token (row 0) outside the current and/or proximal policy's top-p set: the
    PPO loss, metrics and gradient stay finite, and the token adds no gradient (A of both
    signs), as a probability of exactly 0 would."""
    behavior = torch.full((1, 2), math.log(0.3))
    # d log q_1 / d logits (see the hand test): (δ_j1 − q_j) / T on the kept set
    dlogq1 = torch.tensor([-Q[0] * 2, (1 - Q[1]) * 2, 0.0, 0.0])
    for adv in (1.0, -1.0):
        logits = _logits()
        targets = torch.tensor([2 if outside in ("current", "both") else 1, 1])
        cur, _ = action_logprobs(logits, targets, False, 0.5, 0.7)
        prox = cur.detach().clone()
        prox[0] = math.log(Q[1]) if outside == "current" else OUTSIDE_TOP_P_LOGPROB
        loss, m = ppo_loss(cur[None], prox[None], behavior, torch.full((1, 2), adv),
                           torch.ones(1, 2, dtype=torch.bool), AlgorithmConfig())
        loss.backward()
        assert math.isfinite(loss.item()) and torch.isfinite(logits.grad).all()
        assert all(math.isfinite(v.item()) for v in m.values())
        # proximal outside: w = 0, rejected (and out of approx_kl: its term would be e^(q+50))
        assert m["masked_sum"].item() == (outside != "current")
        assert m["approx_kl_sum"].item() < 50
        assert torch.equal(logits.grad[0], torch.zeros(4))
        # the in-set token 1 (r = 1, w = q_1 / 0.3) still learns: −w·A/2 · d log q_1
        torch.testing.assert_close(logits.grad[1], -(Q[1] / 0.3) * adv / 2 * dlogq1,
                                   atol=1e-6, rtol=1e-5)

"""The sampling distribution the learner differentiates: temperature, top-p, tokens outside
the kept set, hand-derived numbers and gradients (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from agent_r1_async import sampling
from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.learner.logprobs import action_logprobs, head_logprobs
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB, ppo_loss

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


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.8, 0.9)])
def test_chunked_head_equals_one_piece_values_and_gradients(temperature, top_p):
    """`learner.head_chunk_tokens`: the head + log-softmax over 3-row chunks, each recomputed in
    backward (checkpoint), gives the one-piece log-probs, entropies and hidden-state gradients
    to 1e-6 relative: those ops are row-wise. The head weight's gradient sums over the rows,
    and chunking changes the order of that sum (a CPU's BLAS blocks a 3-row and a 10-row
    product differently): it agrees to fp32 rounding of a 10-term sum, 1e-6 of its largest
    entry. 10 rows = chunks of 3, 3, 3, 1."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden0 = torch.randn(10, 16) * 3
    targets = torch.randint(0, 50, (10,))
    w_lp, w_ent = torch.randn(10), torch.randn(10)
    got = []
    for chunk in (0, 3):
        head.zero_grad(set_to_none=True)
        hidden = hidden0.clone().requires_grad_(True)
        lp, ent = head_logprobs(head, hidden, targets, True, temperature, top_p, chunk=chunk)
        if chunk == 0:  # the one-piece path is exactly action_logprobs of the head's logits
            ref_lp, ref_ent = action_logprobs(head(hidden0), targets, True, temperature, top_p)
            assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)
        (lp * w_lp + ent * w_ent).sum().backward()
        got.append((lp.detach(), ent.detach(), head.weight.grad.clone(), hidden.grad.clone()))
    (lp0, ent0, gw0, gh0), (lp3, ent3, gw3, gh3) = got
    if top_p < 1:  # the top-p path was exercised: some targets fall outside the kept set
        assert (lp0 == OUTSIDE_TOP_P_LOGPROB).any() and (lp0 > OUTSIDE_TOP_P_LOGPROB).any()
    for a, b in ((lp0, lp3), (ent0, ent3), (gh0, gh3)):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(gw3, gw0, rtol=0, atol=1e-6 * float(gw0.abs().max()))
    assert gw0.abs().sum() > 0 and gh0.abs().sum() > 0


def test_chunked_head_without_grad_and_without_rows():
    """No grad (the proximal pass): chunks without checkpointing, same values; a filler
    micro-batch (0 action tokens) gives empty outputs."""
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 20, bias=False)
    hidden, targets = torch.randn(7, 8), torch.randint(0, 20, (7,))
    with torch.no_grad():
        one, _ = head_logprobs(head, hidden, targets, False, 0.8, 0.9, chunk=0)
        two, ent = head_logprobs(head, hidden, targets, False, 0.8, 0.9, chunk=2)
    assert ent is None
    torch.testing.assert_close(two, one, rtol=1e-6, atol=0)
    lp, ent = head_logprobs(head, hidden[:0], targets[:0], True, 1.0, 1.0, chunk=2)
    assert lp.shape == (0,) and ent.shape == (0,)

"""Decoupled PPO loss, KL/entropy terms and value loss against hand-derived numbers."""

from __future__ import annotations

import math

import pytest
import torch

from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.learner.losses import aggregate, k3_kl, ppo_loss, value_loss

ATOL = 1e-6
LN2, LN10 = math.log(2.0), math.log(10.0)


def _two_rows() -> dict[str, torch.Tensor]:
    """Row 0: three action tokens (positions 1..3); row 1: one action token (position 2).

    Row 0: ratios r = 1.5, 0.5, 1.1; raw weights exp(prox − behav) = 2, 10, 1; A = 1, −1, 2.
    Row 1: r = 1, w = 1, A = 3.
    """
    prox = torch.full((2, 4), -1.0, dtype=torch.float64)
    cur = prox.clone()
    cur[0, 1:] += torch.tensor([math.log(1.5), math.log(0.5), math.log(1.1)], dtype=torch.float64)
    behav = prox.clone()
    behav[0, 1:] -= torch.tensor([LN2, LN10, 0.0], dtype=torch.float64)
    adv = torch.tensor([[0.0, 1.0, -1.0, 2.0], [0.0, 0.0, 3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 0]], dtype=torch.bool)
    return dict(current_logprobs=cur, proximal_logprobs=prox, behavior_logprobs=behav,
                advantages=adv, mask=mask)


P = AlgorithmConfig(eps_low=0.2, eps_high=0.28, c_max=5.0)


def test_decoupled_ppo_token_mean_hand_numbers():
    # Row 0, token 1: w = 2,           min(1.5·1, 1.28·1)   = 1.28  → −2.56   (clipped high)
    #        token 2: w = min(10,5)=5, min(0.5·−1, 0.8·−1)  = −0.8  → +4.0    (clipped low)
    #        token 3: w = 1,           min(2.2, 2.2)        = 2.2   → −2.2
    # Row 1, token 2: w = 1, r = 1, A = 3                           → −3.0
    # token-mean = (−2.56 + 4.0 − 2.2 − 3.0) / 4 = −0.94
    loss, m = ppo_loss(**_two_rows(), algo=P)
    assert loss.item() == pytest.approx(-0.94, abs=ATOL)
    assert m["tokens"].item() == 4
    assert m["clip_high_sum"].item() == 1 and m["clip_low_sum"].item() == 1
    assert m["is_weight_sum"].item() == pytest.approx(2 + 5 + 1 + 1, abs=ATOL)
    assert m["is_weight_max"].item() == pytest.approx(5.0, abs=ATOL)
    assert m["masked_sum"].item() == 0
    # mismatch k3 = e^(p−b) − (p−b) − 1: (2 − ln2 − 1) + (10 − ln10 − 1) + 0 + 0
    assert m["mismatch_kl_sum"].item() == pytest.approx(1 - LN2 + 9 - LN10, abs=ATOL)
    # approx KL (r − 1) − ln r: (0.5 − ln1.5) + (−0.5 − ln0.5) + (0.1 − ln1.1)
    expected = 0.5 - math.log(1.5) - 0.5 - math.log(0.5) + 0.1 - math.log(1.1)
    assert m["approx_kl_sum"].item() == pytest.approx(expected, abs=ATOL)


def test_seq_mean_token_sum_and_external_denominator():
    # Row sums: −2.56 + 4.0 − 2.2 = −0.76 and −3.0; mean over 2 rows = −1.88.
    loss, _ = ppo_loss(**_two_rows(), algo=AlgorithmConfig(c_max=5.0, loss_agg="seq-mean-token-sum"))
    assert loss.item() == pytest.approx(-1.88, abs=ATOL)
    # Gradient accumulation: each micro-batch divided by the whole batch's token count (4)
    # sums to the full-batch token-mean.
    rows = _two_rows()
    parts = [
        ppo_loss(**{k: v[i : i + 1] for k, v in rows.items()}, algo=P, denominator=4)[0]
        for i in range(2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(-0.94, abs=ATOL)


def test_importance_weight_band_masks_tokens():
    # is_mask_high = 8 rejects token 2 of row 0 (raw weight 10): loss (−2.56 − 2.2 − 3)/4 = −1.94
    algo = AlgorithmConfig(c_max=5.0, is_mask_high=8.0)
    loss, m = ppo_loss(**_two_rows(), algo=algo)
    assert loss.item() == pytest.approx(-1.94, abs=ATOL)
    assert m["masked_sum"].item() == 1
    # is_mask_low = 1.5 rejects the weight-1 tokens (row 0 token 3, row 1): (−2.56 + 4)/4 = 0.36
    loss, m = ppo_loss(**_two_rows(), algo=AlgorithmConfig(c_max=5.0, is_mask_low=1.5))
    assert loss.item() == pytest.approx(0.36, abs=ATOL)
    assert m["masked_sum"].item() == 2


def test_sample_weights_scale_token_losses():
    # Row 0 weighted 0.5, row 1 weighted 2: (0.5·−0.76 + 2·−3) / 4 = −1.595
    w = torch.tensor([[0.5], [2.0]], dtype=torch.float64)
    loss, _ = ppo_loss(**_two_rows(), algo=P, sample_weights=w)
    assert loss.item() == pytest.approx(-1.595, abs=ATOL)


def test_kl_and_entropy_terms():
    rows = _two_rows()
    rows["current_logprobs"] = rows["proximal_logprobs"].clone()  # r = 1 → pg from w·A only
    ref = rows["current_logprobs"] + LN2  # k3 per token = 2 − ln2 − 1 = 0.306853
    ent = torch.full((2, 4), 0.25, dtype=torch.float64)
    algo = AlgorithmConfig(c_max=5.0, kl_coef=0.1, entropy_coef=0.01)
    loss, m = ppo_loss(**rows, algo=algo, reference_logprobs=ref, entropy=ent)
    # pg = −(2·1 + 5·−1 + 1·2 + 1·3)/4 = −0.5; kl = 1 − ln2; entropy = 0.25
    assert m["pg_loss"].item() == pytest.approx(-0.5, abs=ATOL)
    assert m["kl_ref"].item() == pytest.approx(1 - LN2, abs=ATOL)
    assert loss.item() == pytest.approx(-0.5 + 0.1 * (1 - LN2) - 0.01 * 0.25, abs=ATOL)


def test_reduces_to_on_policy_ppo_when_behavior_equals_proximal():
    """w ≡ 1: the objective and its gradient equal plain PPO-clip computed independently."""
    g = torch.Generator().manual_seed(0)
    prox = -torch.rand(3, 6, generator=g, dtype=torch.float64) * 3
    cur0 = prox + (torch.rand(3, 6, generator=g, dtype=torch.float64) - 0.5) * 0.8
    adv = torch.randn(3, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 6, generator=g) > 0.3
    cur = cur0.clone().requires_grad_(True)
    loss, m = ppo_loss(cur, prox, prox.clone(), adv, mask, P)
    loss.backward()
    # Independent reference: a Python loop over tokens of −min(rA, clip(r)A), averaged.
    total, n = 0.0, 0
    grad = torch.zeros_like(cur0)
    for i in range(3):
        for j in range(6):
            if not mask[i, j]:
                continue
            r = math.exp(cur0[i, j].item() - prox[i, j].item())
            a = adv[i, j].item()
            unclipped, clipped = r * a, min(max(r, 0.8), 1.28) * a
            total -= min(unclipped, clipped)
            n += 1
            grad[i, j] = -r * a if unclipped <= clipped else 0.0  # d(r)/d(cur) = r
    assert loss.item() == pytest.approx(total / n, abs=ATOL)
    torch.testing.assert_close(cur.grad, grad / n, atol=ATOL, rtol=0)
    assert m["is_weight_sum"].item() == pytest.approx(n, abs=ATOL)
    assert m["mismatch_kl_sum"].item() == pytest.approx(0.0, abs=ATOL)


def test_grpo_first_step_loss_is_minus_mean_advantage():
    # On-policy GRPO at the start of an update: current = proximal = behavior, r = 1, so
    # loss = −mean(A) over action tokens and d loss / d current = −A / N.
    adv = torch.tensor([[0.0, 1.5, -0.5], [0.0, 0.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1], [0, 0, 1]], dtype=torch.bool)
    lp = torch.full((2, 3), -0.7, dtype=torch.float64)
    cur = lp.clone().requires_grad_(True)
    loss, _ = ppo_loss(cur, lp, lp, adv, mask, P)
    loss.backward()
    assert loss.item() == pytest.approx(-(1.5 - 0.5 + 2.0) / 3, abs=ATOL)
    torch.testing.assert_close(cur.grad, -adv * mask / 3, atol=ATOL, rtol=0)


def test_k3_and_aggregate_edge_cases():
    assert k3_kl(torch.tensor(-1.0), torch.tensor(-1.0)).item() == 0.0
    empty = torch.zeros(1, 3, dtype=torch.bool)
    assert aggregate(torch.ones(1, 3), empty, "token-mean", None).item() == 0.0
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(torch.ones(1, 3), empty, "bogus", None)  # type: ignore[arg-type]


def test_clipped_value_loss():
    # Row 0: (1 − 2)² = 1; V_clip = 0.5 + 0.2 = 0.7 → (0.7 − 2)² = 1.69 → 1.69
    # Row 1: (0 − 0)² = 0; V_clip = 0.5 − 0.2 = 0.3 → 0.09 → 0.09
    # loss = 0.5 · (1.69 + 0.09) / 2 = 0.445
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)
    old = torch.tensor([0.5, 0.5], dtype=torch.float64)
    tgt = torch.tensor([2.0, 0.0], dtype=torch.float64)
    loss, _ = value_loss(v, old, tgt, clip=0.2)
    assert loss.item() == pytest.approx(0.445, abs=ATOL)
    loss, _ = value_loss(v, old, tgt, clip=0.0)  # unclipped: 0.5 · (1 + 0) / 2
    assert loss.item() == pytest.approx(0.25, abs=ATOL)

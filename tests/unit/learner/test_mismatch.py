"""The per-update mismatch statistics (learner/mismatch.py), against numbers derived by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agent_r1_async.config import AlgorithmConfig
from agent_r1_async.learner.losses import OUTSIDE_TOP_P_LOGPROB
from agent_r1_async.learner.mismatch import MismatchMeter

LN2, LN8 = math.log(2.0), math.log(8.0)


def _batch(gaps: list[float], versions: list[int]) -> tuple[torch.Tensor, ...]:
    """One row: a context token (mask 0, gap 5 that must be ignored) then the action tokens,
    behavior log-prob −1 everywhere, proximal = behavior + gap."""
    behavior = torch.full((1, len(gaps) + 1), -1.0)
    proximal = behavior + torch.tensor([[5.0, *gaps]])
    mask = torch.tensor([[False] + [True] * len(gaps)])
    return proximal, behavior, mask, torch.tensor([[0, *versions]])


def test_gap_weight_quantiles_truncation_and_freshness():
    # Action-token gaps 0, ln2, −ln2, ln8 → weights 1, 2, 0.5, 8; versions 3, 3, 2, 3 at v3.
    meter = MismatchMeter(AlgorithmConfig(c_max=5.0), version=3)
    meter.add(*_batch([0.0, LN2, -LN2, LN8], [3, 3, 2, 3]))
    m = meter.metrics()
    # mean |gap| = (0 + ln2 + ln2 + ln8) / 4 = 5 ln2 / 4
    assert m["mismatch/logprob_gap_mean"] == pytest.approx(5 * LN2 / 4, rel=1e-6)
    # |gap| sorted 0, ln2, ln2, 3 ln2; p99 at position 0.99·3 = 2.97: ln2 + 0.97·(2 ln2)
    assert m["mismatch/logprob_gap_p99"] == pytest.approx(LN2 + 0.97 * 2 * LN2, rel=1e-6)
    # weights sorted 0.5, 1, 2, 8: p01 at 0.03 → 0.5 + 0.03·0.5; p99 at 2.97 → 2 + 0.97·6
    assert m["mismatch/is_weight_p01"] == pytest.approx(0.515, rel=1e-6)
    assert m["mismatch/is_weight_p99"] == pytest.approx(7.82, rel=1e-6)
    assert m["mismatch/truncated_frac"] == pytest.approx(0.25)  # 8 > c_max = 5
    assert m["mismatch/guard_frac"] == pytest.approx(0.25)  # no mask band
    # fresh (version 3): gaps 0, ln2, ln8 → mean 4 ln2 / 3; 3 of 4 tokens
    assert m["mismatch/fresh_frac"] == pytest.approx(0.75)
    assert m["mismatch/logprob_gap_fresh_mean"] == pytest.approx(4 * LN2 / 3, rel=1e-6)


def test_a_mask_band_and_a_proximal_top_p_floor_count_as_guarded():
    # Mask band [0.6, 4]: w = 0.5 (masked), 8 (truncated at 5 and masked), 1 (kept); and one
    # token the proximal policy cannot sample (its log-prob is the −50 floor): masked, and
    # left out of the gap statistics.
    meter = MismatchMeter(AlgorithmConfig(c_max=5.0, is_mask_low=0.6, is_mask_high=4.0),
                          version=None)
    proximal, behavior, mask, versions = _batch([-LN2, LN8, 0.0, 0.0], [0, 0, 0, 0])
    proximal[0, 4] = OUTSIDE_TOP_P_LOGPROB
    meter.add(proximal, behavior, mask, versions)
    m = meter.metrics()
    assert m["mismatch/guard_frac"] == pytest.approx(3 / 4)
    assert m["mismatch/truncated_frac"] == pytest.approx(1 / 4)
    assert m["mismatch/logprob_gap_mean"] == pytest.approx((LN2 + LN8) / 3, rel=1e-6)
    assert "mismatch/fresh_frac" not in m  # no version: freshness unknown


def test_micro_batches_accumulate_as_one_batch():
    one = MismatchMeter(AlgorithmConfig(), version=1)
    one.add(*_batch([LN2, -LN2, 0.0, LN8], [1, 0, 1, 1]))
    two = MismatchMeter(AlgorithmConfig(), version=1)
    two.add(*_batch([LN2, -LN2], [1, 0]))
    two.add(*_batch([0.0, LN8], [1, 1]))
    assert two.metrics() == pytest.approx(one.metrics(), rel=1e-9)


def test_no_action_tokens_reports_no_correction():
    m = MismatchMeter(AlgorithmConfig(), version=0).metrics()
    assert m["mismatch/is_weight_p01"] == m["mismatch/is_weight_p99"] == 1.0
    assert m["mismatch/logprob_gap_mean"] == m["mismatch/guard_frac"] == 0.0

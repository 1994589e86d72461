"""bench/stats.py: the spread the benches report, checked against hand arithmetic."""

from __future__ import annotations

import math

import pytest

from bench.stats import binomial_se, fmt_ci, fmt_spread, mean_ci, mean_sd, median_range, t975


def test_t_quantiles_from_the_table() -> None:
    assert t975(1) == 12.706
    assert t975(2) == 4.303
    assert t975(30) == 2.042
    assert t975(31) == 1.96
    with pytest.raises(ValueError, match="degrees of freedom"):
        t975(0)


def test_mean_ci_by_hand() -> None:
    # [1, 3]: mean 2, sd sqrt(2), se 1, t(1) 12.706
    assert mean_ci([1.0, 3.0]) == pytest.approx((2.0, 12.706), rel=1e-12)
    # [1, 2, 3]: mean 2, sd 1, se 1/sqrt(3), t(2) 4.303 -> 2.48434
    m, h = mean_ci([1.0, 2.0, 3.0])
    assert (m, h) == pytest.approx((2.0, 4.303 / math.sqrt(3)), rel=1e-12)
    m, h = mean_ci([0.5])
    assert m == 0.5 and math.isnan(h)
    assert fmt_ci([1.0, 3.0], 2) == "2.00 ± 12.71 (n=2)"
    assert fmt_ci([0.5]) == "0.500 ± n/a (n=1)"
    with pytest.raises(ValueError, match="no values"):
        mean_ci([])


def test_mean_sd_by_hand() -> None:
    # [1, 3]: mean 2, squared deviations 1 + 1 = 2 over n − 1 = 1 -> sd sqrt(2)
    assert mean_sd([1.0, 3.0]) == pytest.approx((2.0, math.sqrt(2.0)), rel=1e-12)
    # [2, 4, 4, 4, 5, 5, 7, 9]: mean 40/8 = 5, squared deviations 9+1+1+1+0+0+4+16 = 32
    # over n − 1 = 7 -> sd sqrt(32/7) = 2.13809 (the population sd, over 8, would be 2)
    assert mean_sd([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(
        (5.0, math.sqrt(32 / 7)), rel=1e-12)
    m, sd = mean_sd([0.25])
    assert m == 0.25 and math.isnan(sd)
    with pytest.raises(ValueError, match="no values"):
        mean_sd([])


def test_median_range_and_binomial_se() -> None:
    assert median_range([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    assert fmt_spread([0.5, 0.7, 0.6], 2, "×") == "0.60× (0.50–0.70, n=3)"
    # 100 held-out tasks at success 0.5: sqrt(0.25 / 100) = 0.05
    assert binomial_se(0.5, 100) == pytest.approx(0.05, rel=1e-12)
    assert binomial_se(0.9, 100) == pytest.approx(0.03, rel=1e-12)
    with pytest.raises(ValueError, match="binomial_se"):
        binomial_se(1.5, 100)


def test_paired_diffs_by_hand() -> None:
    from bench.stats import paired_diffs

    # diffs 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3), half = 4.303 * 0.05774 = 0.2484
    p = paired_diffs([0, 1, 2], [0.1, 0.2, 0.3])
    assert p["mean"] == pytest.approx(0.2)
    assert p["half"] == pytest.approx(4.303 * 0.1 / 3 ** 0.5)
    assert p["lo"] == pytest.approx(0.2 - 0.24844, abs=1e-4) and not p["excludes_zero"]
    assert paired_diffs([0, 1], [0.5, 0.5])["excludes_zero"] is True  # sd 0: [0.5, 0.5]

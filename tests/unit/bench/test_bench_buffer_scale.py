"""bench/bench_buffer_scale.py: its pure helpers, checked against hand arithmetic (no timing)."""

from __future__ import annotations

import math

import pytest

from bench import bench_buffer_scale as scale


def test_module_documents_its_command() -> None:
    assert callable(scale.main)
    assert scale.__doc__ is not None and "-m bench.bench_buffer_scale" in scale.__doc__


def test_percentile_is_nearest_rank_by_hand() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]  # sorted 1..5, n - 1 = 4
    assert scale.percentile(values, 0.5) == 3.0  # index int(0.5 · 4) = 2
    assert scale.percentile(values, 0.99) == 4.0  # index int(3.96) = 3
    assert scale.percentile(values, 1.0) == 5.0
    assert scale.percentile(values, 0.0) == 1.0
    # 101 values 0..100: p99 is index int(0.99 · 100) = 99
    assert scale.percentile([float(i) for i in range(101)], 0.99) == 99.0
    assert math.isnan(scale.percentile([], 0.5))
    with pytest.raises(ValueError, match="q must be"):
        scale.percentile([1.0], 1.5)


def test_offered_records_per_s_by_hand() -> None:
    # 1,000 actors × 10 steps/s × 5/4 (a step record each, an end per 4 steps) = 12,500,
    # plus 1,000 reports every 5 s = 200
    assert scale.offered_records_per_s(1000, 10.0, 4, 5.0) == pytest.approx(12_700.0)
    # 10 actors × 8 steps/s × 33/32 = 82.5, plus 10 / 2 s = 5
    assert scale.offered_records_per_s(10, 8.0, 32, 2.0) == pytest.approx(87.5)
    with pytest.raises(ValueError, match="steps"):
        scale.offered_records_per_s(1, 1.0, 0, 5.0)


def test_batch_and_staleness_for_the_groups_in_flight() -> None:
    # 1,000 actors × 2 groups = 2,000 in flight: a batch of 500, 4 versions in flight + 2
    assert scale.auto_batch_groups(1000, 2) == 500
    assert scale.auto_max_staleness(1000, 2, 500) == 6
    # 10 actors × 2 = 20: 5 groups; 300 × 2 = 600: 150 groups, also 6
    assert scale.auto_batch_groups(10, 2) == 5
    assert scale.auto_max_staleness(300, 2, scale.auto_batch_groups(300, 2)) == 6
    # never below 4 groups; 3 × 1 = 3 groups over 4: ceil(0.75) + 2 = 3
    assert scale.auto_batch_groups(3, 1) == 4
    assert scale.auto_max_staleness(3, 1, 4) == 3
    # admission's budget (max_staleness + 1) × batch covers the groups in flight and a batch
    for actors in (10, 100, 300, 1000):
        bg = scale.auto_batch_groups(actors, 2)
        ms = scale.auto_max_staleness(actors, 2, bg)
        assert (ms + 1) * bg >= actors * 2 + bg


def test_context_tokens_grow_with_every_earlier_turn() -> None:
    # the bench's default: prompt 128, then + (32 action + 96 observation) per earlier step
    assert [scale.context_tokens(i, 128, 32, 96) for i in range(4)] == [128, 256, 384, 512]
    # 32 steps of 512 action tokens after a 512-token prompt: step 31 sees 512 + 31 · 512
    assert scale.context_tokens(31, 512, 512, 0) == 16_384


def test_jain_index_by_hand() -> None:
    assert scale.jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert scale.jain_index([4.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)  # 16 / (4 · 16)
    assert scale.jain_index([1.0, 3.0]) == pytest.approx(0.8)  # 16 / (2 · 10)
    assert scale.jain_index([0.0, 0.0]) == 1.0
    assert math.isnan(scale.jain_index([]))


def test_saturation_point_by_hand() -> None:
    # (actors, target/s, sent/s, ingested/s, credit p99 s)
    base = (10, 127.0, 113.0, 113.0, 0.002)  # ingests 113 / 127 = 0.89 of its target
    fine = (100, 1270.0, 1130.0, 1130.0, 0.010)  # 5× the p99 but under 100 ms
    assert scale.saturation_point([base, fine]) is None
    behind = (1000, 12_700.0, 8000.0, 4000.0, 0.05)  # 0.50 of what was sent
    assert scale.saturation_point([base, fine, behind]) == (
        1000, "ingested 0.50 of what the actors sent")
    # kept up with what was sent, but sent little: 2,500 / 3,810 = 0.66 of the target, under
    # 0.9 × the baseline's 113 / 127 = 0.89
    held = (300, 3810.0, 2500.0, 2500.0, 0.05)
    got = scale.saturation_point([base, held])
    assert got == (300, "ingested 0.66 of the target load, the baseline 0.89")
    # credit p99 0.3 s: 150× the baseline's 2 ms and over 100 ms
    slow = (300, 3810.0, 3390.0, 3390.0, 0.3)
    assert scale.saturation_point([base, slow]) == (300, "credit p99 150× the baseline's")
    assert scale.saturation_point([]) is None

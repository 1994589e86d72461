"""bench_stragglers' reading of the buffer's length ledger, on a record worked by hand."""

from __future__ import annotations

import math

import pytest

from bench.bench_stragglers import lengths


def test_lengths_reads_quantile_buckets_ratio_stale_drops_and_trained_step_shares():
    # 100 episodes generated: 60 of <= 16 steps (960 steps), 39 of <= 64 (1,950), 1 of <= 128
    # (120). p50: the 50th episode is in le_16; p99: the 99th is in le_64 (60 + 39 = 99).
    record = {
        "episodes/generated/le_16": 60, "episodes/generated/le_64": 39,
        "episodes/generated/le_128": 1,
        "episodes/generated_steps/le_16": 960, "episodes/generated_steps/le_64": 1950,
        "episodes/generated_steps/le_128": 120,
        "episodes/trained_steps/le_16": 480, "episodes/trained_steps/le_64": 1950,
        "episodes/trained_length_ratio": 1.25, "buffer/drops/stale": 3,
        "episodes/generated_steps_mean": 30.3,  # not a bucket: ignored
    }
    out = lengths(record)
    assert out["generated"] == 100
    assert (out["p50_bucket"], out["p99_bucket"]) == (16, 64)
    assert out["trained_length_ratio"] == 1.25 and out["stale_groups"] == 3
    # trained ÷ generated steps per bucket: 480/960, 1950/1950, 0/120
    assert out["trained_step_fraction"] == {16: 0.5, 64: 1.0, 128: 0.0}
    record["episodes/generated/le_128"] = 2  # the 99th of 101 episodes (99.99) is now in le_128
    assert lengths(record)["p99_bucket"] == 128


def test_lengths_without_generated_episodes_is_an_error():
    with pytest.raises(ValueError, match="no generated episodes"):
        lengths({"episodes/trained_length_ratio": math.nan})

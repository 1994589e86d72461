"""bench_stragglers' reading of a launch: the buffer's length ledger and the steady state, worked by
hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.bench_stragglers import launch_row, lengths


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
        "buffer/drops_by_len/stale/le_64": 13, "buffer/drops_by_len/stale/le_128": 1,
        "episodes/generated_steps_mean": 30.3,  # not a bucket: ignored
    }
    out = lengths(record)
    assert out["generated"] == 100
    assert (out["p50_bucket"], out["p99_bucket"]) == (16, 64)
    assert out["trained_length_ratio"] == 1.25 and out["stale_groups"] == 3
    # trained ÷ generated steps per bucket: 480/960, 1950/1950, 0/120
    assert out["trained_step_fraction"] == {16: 0.5, 64: 1.0, 128: 0.0}
    # stale episodes ÷ generated per bucket: 0/60, 13/39, 1/1
    assert out["stale_episode_fraction"] == {16: 0.0, 64: 1 / 3, 128: 1.0}
    record["episodes/generated/le_128"] = 2  # the 99th of 101 episodes (99.99) is now in le_128
    assert lengths(record)["p99_bucket"] == 128


def test_lengths_without_generated_episodes_is_an_error():
    with pytest.raises(ValueError, match="no generated episodes"):
        lengths({"episodes/trained_length_ratio": math.nan})


def _update(t: float, episodes: int, wait: float, total: float) -> dict:
    return {"time": t, "learner/update_time_s": total, "learner/data_wait_s": wait,
            "learner/episodes": episodes, "learner/tokens_computed": 50,
            "learner/tokens_flat": 100, "episodes/generated/le_16": 8,
            "episodes/trained_length_ratio": 1.0}


def test_a_launch_row_needs_two_updates_for_its_steady_state(tmp_path: Path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps(_update(100.0, 8, 300.0, 400.0)) + "\n")
    row = launch_row(tmp_path)  # one update (a synchronous launch of long episodes): nan
    assert row["updates"] == 1 and math.isnan(row["samples_per_s"]) and math.isnan(row["idle"])
    assert row["generated"] == 8 and row["trained_length_ratio"] == 1.0
    with metrics.open("a") as f:
        f.write(json.dumps(_update(500.0, 8, 100.0, 400.0)) + "\n")
    row = launch_row(tmp_path)  # updates 2..: 8 episodes in 400 s, idle 100 of 400 s
    assert row["updates"] == 2 and row["samples_per_s"] == 8 / 400
    assert row["idle"] == 0.25 and row["update_s"] == 300.0 and row["computed"] == 0.5

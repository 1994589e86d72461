"""Histograms of a metric record (run/output/histograms.py): their metrics.jsonl form, their
W&B form, and episode lengths by bucket between records."""

from __future__ import annotations

import json

import pytest

from agent_r1_async.run.output.histograms import (
    Binned,
    BucketDeltas,
    bucket_edges,
    from_json,
    to_json,
    to_wandb,
)
from agent_r1_async.run.output.metric_names import merge_metrics
from agent_r1_async.run.output.metrics import MetricsLogger


def test_both_kinds_go_to_json_and_back():
    counts = {0: 10, 2: 3}
    assert to_json(counts) == {"bins": [0, 2], "counts": [10, 3]}
    assert from_json(json.loads(json.dumps(to_json(counts)))) == counts
    binned = Binned([0.0, 0.5, 1.0], [1.0, 4.0])
    assert to_json(binned) == {"edges": [0.0, 0.5, 1.0], "counts": [1.0, 4.0]}
    assert from_json(to_json(binned)) == binned
    assert from_json({"edges": [0.0], "counts": [1.0]}) is None  # edges and counts disagree
    assert from_json(3.0) is None


def test_wandb_gets_real_histograms():
    wandb = pytest.importorskip("wandb")
    staleness = to_wandb({0: 10, 2: 3})
    assert isinstance(staleness, wandb.Histogram)
    assert list(staleness.bins) == [-0.5, 0.5, 1.5, 2.5] and list(staleness.histogram) == [10, 0, 3]
    weights = to_wandb(Binned([0.0, 0.5, 1.0], [1.0, 4.0]))
    assert isinstance(weights, wandb.Histogram) and list(weights.histogram) == [1, 4]
    assert to_wandb({}) is None and to_wandb(Binned([0.0, 1.0], [0.0])) is None


def _buckets(series: str, counts: dict[int, int]) -> dict[str, int]:
    return {f"episodes/{series}/le_{b}": n for b, n in counts.items()}


def test_lengths_by_bucket_are_the_episodes_since_the_previous_record():
    deltas = BucketDeltas()
    assert deltas({"version": 1, **_buckets("generated", {1: 4, 2: 1, 4: 0})}) == {}  # baseline
    got = deltas({**_buckets("generated", {1: 6, 2: 1, 4: 3}), **_buckets("trained", {1: 2})})
    assert got == {"episodes/generated_hist": Binned(bucket_edges([1, 2, 4]), [2.0, 0.0, 3.0])}
    assert bucket_edges([1, 2, 4]) == [0.5, 1.5, 2.5, 4.5]
    # A buffer restarted from an older snapshot counts less: no histogram, a new baseline.
    assert deltas(_buckets("generated", {1: 5, 2: 1, 4: 3})) == {}
    assert deltas(_buckets("generated", {1: 7, 2: 1, 4: 3}))["episodes/generated_hist"].counts == [
        2.0, 0.0, 0.0]


def test_the_importance_weight_histogram_reaches_the_record_and_metrics_jsonl(tmp_path):
    from agent_r1_async.config import config_from_dict

    update = {"metrics": {"version": 3}, "staleness_hist": {0: 5},
              "is_weight_hist": {"edges": [0.0, 2.5, 5.0], "counts": [7.0, 1.0]}}
    _, hists = merge_metrics(update, {})
    assert hists["is_weight/hist"] == Binned([0.0, 2.5, 5.0], [7.0, 1.0])
    assert "is_weight/hist" not in merge_metrics({"metrics": {"version": 3}}, {})[1]
    logger = MetricsLogger(config_from_dict({"logging": {"wandb_mode": "disabled"}}), tmp_path)
    logger.log({"version": 3}, step=3, histograms=hists)
    logger.close()
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert line["is_weight/hist"] == {"edges": [0.0, 2.5, 5.0], "counts": [7.0, 1.0]}
    assert line["staleness/hist"] == {"bins": [0], "counts": [5]}

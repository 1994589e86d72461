"""The histograms of a metric record: their metrics.jsonl form and their W&B form.

Two kinds:
- `Counts` ({value: count}, one bin per integer value): the token-weighted staleness of the
  batch (`staleness/hist`). In metrics.jsonl `{"bins": [values], "counts": [...]}`.
- `Binned` (explicit edges): the batch's importance weights over [0, c_max]
  (`is_weight/hist`, learner/is_weights.py) and the episodes generated and trained since the
  previous record by length bucket (`episodes/generated_hist`, `episodes/trained_hist`,
  `BucketDeltas`). In metrics.jsonl `{"edges": [...], "counts": [...]}`.

Both go to W&B as `wandb.Histogram` (`to_wandb`): W&B draws each update's distribution, and
its histogram panels show them over the updates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Counts = dict[int, int]


@dataclass(frozen=True)
class Binned:
    edges: list[float]
    """len(counts) + 1 increasing bin edges."""
    counts: list[float]


Hist = Counts | Binned


def to_json(hist: Hist) -> dict[str, list]:
    if isinstance(hist, Binned):
        return {"edges": list(hist.edges), "counts": list(hist.counts)}
    keys = sorted(hist)
    return {"bins": keys, "counts": [hist[k] for k in keys]}


def from_json(obj: Any) -> Hist | None:
    """A histogram read back from metrics.jsonl (None: not one)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("counts"), list):
        return None
    counts = obj["counts"]
    if isinstance(obj.get("edges"), list) and len(obj["edges"]) == len(counts) + 1:
        return Binned([float(e) for e in obj["edges"]], [float(c) for c in counts])
    if isinstance(obj.get("bins"), list) and len(obj["bins"]) == len(counts):
        return {int(b): int(c) for b, c in zip(obj["bins"], counts, strict=True)}
    return None


def to_wandb(hist: Hist) -> Any:
    """A `wandb.Histogram`, or None for an empty one (nothing to draw)."""
    import numpy as np
    import wandb

    if isinstance(hist, Binned):
        if not any(hist.counts):
            return None
        return wandb.Histogram(np_histogram=(np.array(hist.counts, dtype=float),
                                             np.array(hist.edges, dtype=float)))
    if not hist:
        return None
    lo, hi = min(hist), max(hist)
    edges = np.arange(lo, hi + 2, dtype=float) - 0.5  # one bin per value
    counts = np.array([hist.get(k, 0) for k in range(lo, hi + 1)], dtype=float)
    return wandb.Histogram(np_histogram=(counts, edges))


_BUCKET = re.compile(r"^episodes/(generated|trained)/le_(\d+)$")


def bucket_edges(buckets: list[int]) -> list[float]:
    """Edges of length buckets (each b holds the lengths above the previous bucket, up to b):
    [0.5, b1 + 0.5, b2 + 0.5, ...]."""
    return [0.5, *(b + 0.5 for b in buckets)]


class BucketDeltas:
    """The episodes generated and trained since the previous record, by length bucket.

    The buffer counts them since the run began (`episodes/generated/le_<b>`,
    `episodes/trained/le_<b>`, buffers/lengths.py); each call returns the differences from
    the last record that had them, as `episodes/generated_hist` and `episodes/trained_hist`.
    The first record, and one whose counts went down (a buffer restarted from an older
    snapshot), only sets the baseline."""

    def __init__(self) -> None:
        self._last: dict[str, dict[int, float]] = {}

    def __call__(self, record: dict[str, Any]) -> dict[str, Binned]:
        now: dict[str, dict[int, float]] = {}
        for key, value in record.items():
            m = _BUCKET.match(key)
            if m and isinstance(value, int | float):
                now.setdefault(m.group(1), {})[int(m.group(2))] = float(value)
        out: dict[str, Binned] = {}
        for series, counts in now.items():
            last = self._last.get(series)
            self._last[series] = counts
            if last is None:
                continue
            buckets = sorted(counts)
            delta = [counts[b] - last.get(b, 0.0) for b in buckets]
            if any(d < 0 for d in delta):
                continue
            out[f"episodes/{series}_hist"] = Binned(bucket_edges(buckets), delta)
        return out

"""`agent-r1-async report RUN_DIR`: PNG plots of reward and staleness from metrics.jsonl.

Reads only `RUN_DIR/metrics.jsonl` (written by `monitor.MetricsLogger`), so it works on a
finished or running run without W&B. Writes `RUN_DIR/plots/{reward,staleness}.png`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {run_dir} a run directory?)")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n != len(path.read_text().splitlines()):  # a torn last line is expected mid-write
                raise
    return rows


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        if isinstance(r.get(key), (int, float)):
            xs.append(r["time"] / 60.0)
            ys.append(float(r[key]))
    return xs, ys


def _smooth(ys: list[float], k: int = 5) -> list[float]:
    out, acc = [], []
    for y in ys:
        acc.append(y)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out


def write_report(run_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in [("reward/mean", "train reward"), ("eval/reward", "held-out reward")]:
        xs, ys = _series(rows, key)
        if xs:
            style = "o-" if key.startswith("eval") else "-"
            ax.plot(xs, ys if key.startswith("eval") else _smooth(ys), style, label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("reward")
    ax.set_title(f"reward — {Path(run_dir).name}")
    ax.grid(alpha=0.3)
    ax.legend()
    path = out_dir / "reward.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in [("staleness/mean", "mean (token-weighted)"), ("staleness/max", "max")]:
        xs, ys = _series(rows, key)
        if xs:
            ax.plot(xs, ys, "-", label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("learner version − policy version")
    ax.set_title(f"staleness — {Path(run_dir).name}")
    ax.grid(alpha=0.3)
    ax.legend()
    path = out_dir / "staleness.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written

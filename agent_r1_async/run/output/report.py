"""`agent-r1-async report RUN_DIR`: PNG plots of reward and staleness from metrics.jsonl.

Reads only `RUN_DIR/metrics.jsonl` (written by `metrics.MetricsLogger`), so it works on a
finished or running run without W&B. Writes `RUN_DIR/plots/{reward,staleness}.png`; the
reward plot carries the held-out results as what they are: the evaluations before and after RL
as separate points (nothing was measured between them, so no line joins them) and, with
`eval.every_updates`, the periodic `eval/periodic/*` evaluations as points joined in version
order (a measured curve).
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


def _series(rows: list[dict[str, Any]], keys: str | tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(update, value) of every row holding one of `keys` (a tuple joins several into one
    line), in update order: a periodic evaluation's row is written after later updates'."""
    pairs = []
    for r in rows:
        for key in (keys,) if isinstance(keys, str) else keys:
            if isinstance(r.get(key), (int, float)):
                # update: monotonic across resumes (time restarts)
                pairs.append((float(r["update"]), float(r[key])))
    pairs.sort(key=lambda p: p[0])  # stable: rows of one update keep their order
    return [x for x, _ in pairs], [y for _, y in pairs]


def _smooth(ys: list[float], k: int = 5) -> list[float]:
    out, acc = [], []
    for y in ys:
        acc.append(y)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out


STYLES = {"smooth": "-", "joined": "o-", "points": "o"}
"""How a series is drawn: a moving average of every update's value; measured points joined
(one per update, or periodic evaluations); isolated points (evaluations with nothing measured
between them)."""


def _plot(
    rows: list[dict[str, Any]], series: list[tuple[str | tuple[str, ...], str, str]], ylabel: str,
    title: str,
    path: Path,
) -> Path:
    """One PNG: each (key, label, style) series against the learner version (`STYLES`)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, style in series:
        xs, ys = _series(rows, key)
        if xs:
            ax.plot(xs, _smooth(ys) if style == "smooth" else ys, STYLES[style], label=label,
                    markersize=7 if style == "points" else 4)
    ax.set_xlabel("update (learner version)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


SUCCESS_METRICS = ("success", "em", "accuracy", "f1")
"""Env metrics plotted as the success line, the first one the run logged."""


def success_metric(rows: list[dict[str, Any]]) -> str | None:
    """The env metric to plot as success: the first of SUCCESS_METRICS the run logged."""
    logged = {k for r in rows for k in r}
    for name in SUCCESS_METRICS:
        if any(f"{p}/{name}" in logged for p in ("env", "eval/after", "eval/periodic")):
            return name
    return None


def write_report(run_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    rows = read_metrics(run_dir)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(exist_ok=True)
    name = Path(run_dir).name
    m = success_metric(rows) or "success"
    return [
        _plot(rows, [("reward/mean", "train reward (outcome + process)", "smooth"),
                     (f"env/{m}", f"train {m}", "smooth"),
                     (f"eval/before/{m}", f"held-out {m} before RL", "points"),
                     (f"eval/after/{m}", f"held-out {m} after RL", "points"),
                     (f"eval/periodic/{m}", f"held-out {m} (eval.every_updates subset)", "joined")],
              "reward", f"reward — {name}", out_dir / "reward.png"),
        _plot(rows, [("staleness/mean", "mean (token-weighted)", "joined"),
                     ("staleness/max", "max", "joined")],
              "learner version − policy version", f"staleness — {name}", out_dir / "staleness.png"),
    ]

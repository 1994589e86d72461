"""`agent-r1-async report RUN_DIR`: PNG plots of reward, staleness and episode lengths.

Reads only `RUN_DIR/metrics.jsonl` (written by `metrics.MetricsLogger`), so it works on a
finished or running run without W&B. Writes `RUN_DIR/plots/{reward,staleness}.png`; the
reward plot carries the held-out results as what they are: the evaluations before and after RL
as separate points (nothing was measured between them, so no line joins them) and, with
`eval.every_updates`, the periodic `eval/periodic/*` evaluations as points joined in version
order (a measured curve).

Two distributions over time, as heat maps with one column per logged update (an update with
no record stays blank, nothing is drawn between records):
- `staleness_dist.png` (runs that log `staleness/hist`): each update's share of action
  tokens at each staleness;
- `episode_lengths.png` (runs that log `episodes/generated/le_<b>`): the share of the
  episodes generated, and of those trained, since the previous record in each length
  bucket (from the buffer's counts since the run began; a record whose counts went down, a
  buffer restarted from an older snapshot, stays blank).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.histograms import from_json
from agent_r1_async.run.output.metrics_file import read_records


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `RUN_DIR/metrics.jsonl` (a torn last line is skipped: a running run)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {run_dir} a run directory?)")
    return read_records(path)


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


def staleness_shares(rows: list[dict[str, Any]]) -> dict[int, dict[int, float]]:
    """{update: {staleness: share of its action tokens}} from `staleness/hist`."""
    out: dict[int, dict[int, float]] = {}
    for r in rows:
        hist = from_json(r.get("staleness/hist"))
        if isinstance(hist, dict) and sum(hist.values()) > 0:
            total = sum(hist.values())
            out[int(r["update"])] = {k: v / total for k, v in hist.items()}
    return out


_BUCKET = re.compile(r"^episodes/(generated|trained)/le_(\d+)$")


def length_shares(rows: list[dict[str, Any]], series: str) -> dict[int, dict[int, float]]:
    """{update: {bucket: share}} of the episodes `series` (generated, trained) since the
    previous record, from the buffer's cumulative counts (module docstring)."""
    out: dict[int, dict[int, float]] = {}
    last: dict[int, float] = {}  # metrics.jsonl starts with the run: counts start at 0
    for r in sorted(rows, key=lambda r: r["update"]):
        counts = {int(m.group(2)): float(v) for k, v in r.items()
                  if (m := _BUCKET.match(k)) and m.group(1) == series
                  and isinstance(v, int | float)}
        if not counts:
            continue
        delta = {b: n - last.get(b, 0.0) for b, n in counts.items()}
        total = sum(delta.values())
        if total > 0 and min(delta.values()) >= 0:
            out[int(r["update"])] = {b: d / total for b, d in delta.items()}
        last = counts
    return out


def _heat(ax: Any, shares: dict[int, dict[int, float]], ys: list[int], labels: list[str],
          title: str, ylabel: str) -> Any:
    """One heat map: a column per update that has shares, blank elsewhere."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    lo, hi = min(shares), max(shares)
    grid = np.full((len(ys), hi - lo + 1), np.nan)
    for u, col in shares.items():
        for j, y in enumerate(ys):
            grid[j, u - lo] = col.get(y, 0.0)
    mesh = ax.pcolormesh(np.arange(lo - 0.5, hi + 1.5), np.arange(len(ys) + 1) - 0.5,
                         np.ma.masked_invalid(grid), cmap="viridis", vmin=0.0, vmax=1.0,
                         shading="flat")
    ax.set_yticks(range(len(ys)), labels)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return mesh


def _plot_staleness_dist(rows: list[dict[str, Any]], title: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    shares = staleness_shares(rows)
    if not shares:
        return None
    ys = list(range(max(k for col in shares.values() for k in col) + 1))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    mesh = _heat(ax, shares, ys, [str(y) for y in ys], "share of each update's action tokens",
                 "staleness (versions behind)")
    ax.set_xlabel("update (learner version)")
    fig.colorbar(mesh, ax=ax, label="share of tokens")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_lengths(rows: list[dict[str, Any]], title: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    panels = [(s, length_shares(rows, s)) for s in ("generated", "trained")]
    panels = [(s, sh) for s, sh in panels if sh]
    if not panels:
        return None
    buckets = sorted({b for _, sh in panels for col in sh.values() for b in col})
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 + 2.2 * len(panels)),
                             sharex=True, squeeze=False)
    meshes = [_heat(ax, sh, buckets, [f"≤{b}" for b in buckets],
                    f"episodes {series} since the previous logged update", "steps")
              for ax, (series, sh) in zip(axes[:, 0], panels, strict=True)]
    axes[-1, 0].set_xlabel("update (learner version)")
    fig.colorbar(meshes[-1], ax=list(axes[:, 0]), label="share of episodes")
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(run_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    rows = read_metrics(run_dir)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(exist_ok=True)
    name = Path(run_dir).name
    m = success_metric(rows) or "success"
    distributions = [
        _plot_staleness_dist(rows, f"staleness distribution — {name}",
                             out_dir / "staleness_dist.png"),
        _plot_lengths(rows, f"episode lengths — {name}", out_dir / "episode_lengths.png"),
    ]
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
        *(p for p in distributions if p is not None),
    ]

"""Metrics sinks for a run: W&B (offline when there is no API key), metrics.jsonl, console.

Every logged record is a flat dict of numbers keyed like `reward/mean`, `staleness/max`,
`actor/a0/tokens_per_s`, plus `update` (learner version) and `time` (seconds since start).
The same records go to `RUN_DIR/metrics.jsonl` (one JSON object a line) and to W&B, so
`agent-r1-async report RUN_DIR` can plot a run without W&B. Histograms (staleness) are
logged to W&B as `wandb.Histogram` and to the JSONL file as `{"bins": [...], "counts": [...]}`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal

from agent_r1_async.config import LoggingConfig, RunConfig, config_to_dict

Histogram = dict[int, int]
WandbMode = Literal["online", "offline", "disabled"]


def wandb_mode(cfg: LoggingConfig) -> WandbMode:
    """auto -> online with an API key, offline without (works with no network at all)."""
    if cfg.wandb_mode != "auto":
        return cfg.wandb_mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class MetricsLogger:
    """Writes metric records to metrics.jsonl, W&B and the console."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, resume_id: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        self._console = cfg.logging.console
        self._start = time.monotonic()
        self._wandb: Any = None
        self._wandb_dir: str | None = None
        self._axes: set[str] = set()  # W&B key prefixes with their own x axis (log_at_version)
        mode = wandb_mode(cfg.logging)
        self._wandb_url: str | None = None
        if mode != "disabled":
            self._wandb = self._init_wandb(cfg, mode, resume_id)
            self._wandb_dir = str(Path(self._wandb.dir).parent)
            self._wandb_url = self._wandb.url if mode == "online" else None
            define_metrics(self._wandb)

    def _init_wandb(self, cfg: RunConfig, mode: WandbMode, resume_id: str | None) -> Any:
        wandb_dir = self.run_dir / "wandb-root"
        wandb_dir.mkdir(exist_ok=True)
        os.environ.setdefault("WANDB_DIR", str(wandb_dir))
        os.environ.setdefault("WANDB_CACHE_DIR", str(wandb_dir / "cache"))
        os.environ.setdefault("WANDB_CONFIG_DIR", str(wandb_dir / "config"))
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        run_id = resume_id or self.run_dir.name.replace("/", "-")
        (self.run_dir / "wandb_run_id").write_text(run_id)
        return wandb.init(
            project=cfg.logging.wandb_project,
            entity=cfg.logging.wandb_entity or None,
            name=self.run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(wandb_dir),
            mode=mode,
            config=config_to_dict(cfg),
        )

    @property
    def wandb_dir(self) -> str | None:
        """The W&B run's directory (kept after `close`, for the closing lines)."""
        return self._wandb_dir

    def closing_lines(self) -> list[str]:
        """Where the W&B run is: its URL (online) or its offline directory and the command
        that uploads it."""
        if self._wandb_dir is None:
            return []
        if self._wandb_url:
            return [f"W&B run: {self._wandb_url}"]
        return [f"W&B run (offline): {self._wandb_dir}",
                f"upload it with: wandb sync {self._wandb_dir}"]

    def log(self, metrics: dict[str, Any], step: int, histograms: dict[str, Histogram] | None = None) -> None:
        record: dict[str, Any] = {"update": step, "time": time.monotonic() - self._start}
        record.update({k: v for k, v in metrics.items() if _is_number(v)})
        for name, hist in (histograms or {}).items():
            keys = sorted(hist)
            record[name] = {"bins": keys, "counts": [hist[k] for k in keys]}
        self._jsonl.write(json.dumps(record) + "\n")
        if self._wandb is not None:
            self._wandb.log(self._wandb_record(record, histograms or {}), step=step)

    def log_at_version(self, metrics: dict[str, Any], version: int, step: int,
                       x_axis: str) -> None:
        """A record about an earlier `version` (a periodic evaluation finishing later):
        metrics.jsonl gets `update` = version; W&B gets it at `step` (its steps only increase)
        with `metrics[x_axis]` declared as the x axis of the record's key prefix."""
        record: dict[str, Any] = {"update": version, "time": time.monotonic() - self._start}
        record.update({k: v for k, v in metrics.items() if _is_number(v)})
        self._jsonl.write(json.dumps(record) + "\n")
        if self._wandb is not None:
            prefix = x_axis.rsplit("/", 1)[0]
            if prefix not in self._axes:
                self._wandb.define_metric(x_axis)
                self._wandb.define_metric(f"{prefix}/*", step_metric=x_axis)
                self._axes.add(prefix)
            self._wandb.log({k: v for k, v in record.items() if k != "update"}, step=step)

    def _wandb_record(self, record: dict[str, Any], histograms: dict[str, Histogram]) -> dict:
        import numpy as np
        import wandb

        out = {k: v for k, v in record.items() if k not in histograms}
        for name, hist in histograms.items():
            if not hist:
                continue
            lo, hi = min(hist), max(hist)
            edges = np.arange(lo, hi + 2, dtype=float) - 0.5  # one bin per staleness value
            counts = np.array([hist.get(k, 0) for k in range(lo, hi + 1)], dtype=float)
            out[name] = wandb.Histogram(np_histogram=(counts, edges))
        return out

    def console(self, line: str) -> None:
        if self._console:
            print(line, file=sys.stdout, flush=True)

    def close(self) -> None:
        self._jsonl.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


METRIC_SECTIONS = ("reward", "env", "eval", "staleness", "is_weight", "learner", "actors", "actor",
                   "buffer", "sft")
"""W&B sections (panels are grouped by the prefix before '/'); every metric's x-axis is
`update`, the learner version, so runs, resumes and held-out points line up."""


def define_metrics(run: Any) -> None:
    """`update` is the x-axis of every metric, section by section (W&B `define_metric`)."""
    run.define_metric("update")
    for section in METRIC_SECTIONS:
        run.define_metric(f"{section}/*", step_metric="update")
    run.define_metric("time", step_metric="update")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def progress_line(m: dict[str, Any]) -> str:
    """One console line with the key numbers of an update."""

    def f(key: str, fmt: str = "{:.3f}") -> str:
        v = m.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    return (
        f"v{m.get('version', '?')} | reward {f('reward/mean')} | "
        f"staleness {f('staleness/mean', '{:.2f}')}/{f('staleness/max', '{:.0f}')} | "
        f"IS w {f('is_weight/mean', '{:.2f}')} | gen {f('actors/tokens_per_s', '{:.0f}')} tok/s | "
        f"ready {f('buffer/groups_ready', '{:.0f}')} | {f('learner/update_time_s', '{:.1f}')} s/upd | "
        f"idle {f('learner/idle_ratio', '{:.0%}')}"
    )


# Learner metric names -> the names a user looks for in W&B.
_RENAME = {
    "staleness_mean": "staleness/mean",
    "staleness_max": "staleness/max",
    "is_weight_mean": "is_weight/mean",
    "is_weight_max": "is_weight/max",
    "mismatch_kl": "is_weight/mismatch_kl",
    "masked_frac": "is_weight/masked_frac",
    "idle_frac": "learner/idle_ratio",
}


class ActorRates:
    """Actor throughput between two metric records, from the actors' cumulative counters.

    An actor's own `tokens_per_s` covers its last stats window (`actors.stats_interval_s`,
    5 s): a learner-bound actor that waits for admission at that moment reads 0 although it
    generated a full batch since the last update. Here each actor's rates are the differences
    of its totals (`tokens_total`, episodes ended) between the reports seen at consecutive
    records, over the difference of their times; the first record uses the window rates.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}

    def __call__(self, actor_id: str, stats: dict[str, Any]) -> tuple[float, float]:
        """(tokens/s, episodes/s) of this actor since its report at the previous record."""
        now = (float(stats["time"]), int(stats.get("tokens_total", 0)),
               int(stats["episodes_done"]) + int(stats["episodes_failed"]))
        prev = self._last.get(actor_id)
        self._last[actor_id] = now
        if prev is None or now[0] <= prev[0] or now[1] < prev[1]:  # first, same report, restart
            return float(stats["tokens_per_s"]), float(stats["episodes_per_s"])
        dt = now[0] - prev[0]
        return (now[1] - prev[1]) / dt, (now[2] - prev[2]) / dt


def merge_metrics(
    update: dict[str, Any], buffer: dict[str, Any], rates: ActorRates | None = None
) -> tuple[dict, dict]:
    """Flatten learner + buffer + actor metrics into one record and its histograms.

    `rates` (kept across records) turns actor throughput into averages since the previous
    record; without it the actors' last-window rates are reported.
    """
    out: dict[str, Any] = {}
    for k, v in update["metrics"].items():
        if "/" in k or k == "version":
            out[k] = v
        else:
            out[_RENAME.get(k, f"learner/{k}")] = v
    for key in ("groups_ready", "groups_assembling", "episodes_stored", "bytes_stored",
                "in_flight_groups", "accepted_groups", "sampled_groups", "ingest_records_per_s",
                "records_per_frame"):
        if key in buffer:
            out[f"buffer/{key}"] = buffer[key]
    for reason, count in buffer.get("drops", {}).items():
        out[f"buffer/drops/{reason}"] = count
    actors = buffer.get("actors", {})
    if actors:
        tok_total = eps_total = 0.0
        for actor_id, stats in actors.items():
            for k in ("weight_sync_latency_s", "policy_version", "episodes_in_flight",
                      "episodes_done", "gen_time_s", "env_time_s"):
                out[f"actor/{actor_id}/{k}"] = stats[k]
            tok, eps = (rates(actor_id, stats) if rates is not None
                        else (stats["tokens_per_s"], stats["episodes_per_s"]))
            out[f"actor/{actor_id}/tokens_per_s"] = tok
            out[f"actor/{actor_id}/episodes_per_s"] = eps
            tok_total += tok
            eps_total += eps
        out["actors/tokens_per_s"] = tok_total
        out["actors/episodes_per_s"] = eps_total
        out["actors/weight_sync_latency_s"] = max(s["weight_sync_latency_s"] for s in actors.values())
        errors: dict[str, int] = {}
        for stats in actors.values():  # each actor's totals since it started
            for kind, n in stats.get("env_errors", {}).items():
                errors[kind] = errors.get(kind, 0) + int(n)
        for kind, n in errors.items():
            out[f"env/errors/{kind}"] = n
    hist = {int(k): int(v) for k, v in update.get("staleness_hist", {}).items()}
    return out, {"staleness/hist": hist}


def failing_actors(actors: dict[str, Any], last_n: int, num_actors: int) -> str | None:
    """Why the run should stop, when every one of the `num_actors` actors reported that its
    last ceil(last_n / num_actors) episodes all failed (so the run's last `last_n` did); the
    message quotes each actor's latest failure. None otherwise (or when `last_n` is 0)."""
    per_actor = -(-last_n // max(1, num_actors))
    if last_n <= 0 or len(actors) < num_actors:
        return None
    if any(int(s.get("failed_streak", 0)) < per_actor for s in actors.values()):
        return None
    reasons = sorted({str(s.get("last_error", "")) for s in actors.values()})
    return (f"the last {per_actor * num_actors} episodes all failed "
            f"(launch.stop_after_failed_episodes={last_n}): " + "; ".join(reasons))

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
from typing import Any

from agent_r1_async.config import LoggingConfig, RunConfig, config_to_dict

Histogram = dict[int, int]


def wandb_mode(cfg: LoggingConfig) -> str:
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
        mode = wandb_mode(cfg.logging)
        if mode != "disabled":
            self._wandb = self._init_wandb(cfg, mode, resume_id)

    def _init_wandb(self, cfg: RunConfig, mode: str, resume_id: str | None) -> Any:
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
        return None if self._wandb is None else str(Path(self._wandb.dir).parent)

    def log(self, metrics: dict[str, Any], step: int, histograms: dict[str, Histogram] | None = None) -> None:
        record: dict[str, Any] = {"update": step, "time": time.monotonic() - self._start}
        record.update({k: v for k, v in metrics.items() if _is_number(v)})
        for name, hist in (histograms or {}).items():
            keys = sorted(hist)
            record[name] = {"bins": keys, "counts": [hist[k] for k in keys]}
        self._jsonl.write(json.dumps(record) + "\n")
        if self._wandb is not None:
            self._wandb.log(self._wandb_record(record, histograms or {}), step=step)

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

"""Metrics sinks for a run: W&B (offline when there is no API key), metrics.jsonl, console.

Every logged record is a flat dict of numbers keyed like `reward/mean`, `staleness/max`,
`actor/a0/tokens_per_s` (run/output/metric_names.py), plus `update` (learner version) and
`time` (seconds since start). The same records go to `RUN_DIR/metrics.jsonl` (one JSON object
a line, run/output/metrics_file.py) and to W&B, so `agent-r1-async report RUN_DIR` can plot a
run without W&B. Histograms (staleness, importance weights, episode lengths by bucket;
run/output/histograms.py) are logged to W&B as
`wandb.Histogram` and to the JSONL file as `{"bins": [...], "counts": [...]}` (one bin per
value) or `{"edges": [...], "counts": [...]}`. Episode samples (run/output/episodes.py) go to
W&B as tables through `log_table`, whose failure is reported and stops nothing.

A sink never stops the run by raising: the first write that fails (a full disk, a quota, any
OSError; W&B's own errors once its run started) is kept as one line,
`MetricsLogger.write_failure` (`disk full: PATH (N bytes free): what stopped`), that sink
stops, and the other goes on. Only W&B failing to start for another reason than a full disk
raises, at once (a wrong entity, no network in online mode).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from agent_r1_async.config import LoggingConfig, RunConfig, config_to_dict
from agent_r1_async.disk import disk_full, free_bytes
from agent_r1_async.run.output.histograms import Hist, to_json, to_wandb
from agent_r1_async.run.output.metric_names import merge_metrics
from agent_r1_async.run.output.metrics_file import JsonlFile, logged_updates

Histogram = Hist
WandbMode = Literal["online", "offline", "disabled"]

_NEARLY_FULL = 1 << 20
"""A sink write that fails with less than this free on its filesystem failed for a full disk
(W&B's errors do not always carry the OS's ENOSPC)."""


def wandb_mode(cfg: LoggingConfig) -> WandbMode:
    """auto -> online with an API key, offline without (works with no network at all)."""
    if cfg.wandb_mode != "auto":
        return cfg.wandb_mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class MetricsLogger:
    """Writes metric records to metrics.jsonl (`JsonlFile`: each line on disk when `log`
    returns), W&B and the console.

    Failures: `log`, `log_at_version` and `close` never raise for a sink that cannot write. The
    first failure is `write_failure`, one line naming the file, the bytes free on its
    filesystem and what stopped (`disk full: ...` when the disk or quota is full); that sink is
    then off for the rest of the run (metrics.jsonl never gets a torn line; W&B is not finished
    twice) and the other goes on. The launcher prints the line before its closing lines.

    A resumed run whose last update is missing from metrics.jsonl gets it from its checkpoint
    (`log_checkpointed`).
    """

    def __init__(self, cfg: RunConfig, run_dir: str | Path, resume_id: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._failure: str | None = None
        self._jsonl: JsonlFile | None = None
        try:
            self._jsonl = JsonlFile(self.run_dir / "metrics.jsonl")
        except OSError as e:
            self._failed(e, self.run_dir / "metrics.jsonl",
                         "metrics.jsonl could not be opened: no update is logged to it")
        self._console = cfg.logging.console
        self._start = time.monotonic()
        self._wandb: Any = None
        self._wandb_dir: str | None = None
        self._axes: set[str] = set()  # W&B key prefixes with their own x axis (log_at_version)
        mode = wandb_mode(cfg.logging)
        self._wandb_url: str | None = None
        if mode != "disabled":
            self._start_wandb(cfg, mode, resume_id)

    def _start_wandb(self, cfg: RunConfig, mode: WandbMode, resume_id: str | None) -> None:
        """W&B's run; on a full disk W&B is off (`write_failure`), any other error raises."""
        wandb_dir = self.run_dir / "wandb-root"
        try:
            self._wandb = self._init_wandb(cfg, mode, resume_id)
        except Exception as e:
            if not self._disk_full(e, wandb_dir):
                raise
            self._failed(e, wandb_dir, "W&B could not start: the run logs to metrics.jsonl only")
            return
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

    @property
    def write_failure(self) -> str | None:
        """The first failed write of a sink, in one line, or None: `disk full: PATH (N bytes
        free): what stopped` when its filesystem or quota is full, else `cannot write PATH
        (the error; N bytes free): what stopped`."""
        return self._failure

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
            record[name] = to_json(hist)
        self._write_jsonl(record, step)
        self._to_wandb(lambda run: run.log(self._wandb_record(record, histograms or {}),
                                           step=step), step)

    def log_at_version(self, metrics: dict[str, Any], version: int, step: int,
                       x_axis: str) -> None:
        """A record about an earlier `version` (a periodic evaluation finishing later):
        metrics.jsonl gets `update` = version; W&B gets it at `step` (its steps only increase)
        with `metrics[x_axis]` declared as the x axis of the record's key prefix."""
        record: dict[str, Any] = {"update": version, "time": time.monotonic() - self._start}
        record.update({k: v for k, v in metrics.items() if _is_number(v)})
        self._write_jsonl(record, version)

        def send(run: Any) -> None:
            prefix = x_axis.rsplit("/", 1)[0]
            if prefix not in self._axes:
                run.define_metric(x_axis)
                run.define_metric(f"{prefix}/*", step_metric=x_axis)
                self._axes.add(prefix)
            run.log({k: v for k, v in record.items() if k != "update"}, step=step)

        self._to_wandb(send, step)

    def _write_jsonl(self, record: dict[str, Any], update: int) -> None:
        if self._jsonl is None:
            return
        try:
            self._jsonl.write_line(json.dumps(record))
        except OSError as e:
            self._failed(e, self._jsonl.path,
                         f"metrics.jsonl stopped at update {update}: it and later updates are "
                         "not logged there")
            self._close_jsonl()

    def _to_wandb(self, call: Callable[[Any], None], step: int) -> None:
        if self._wandb is None:
            return
        try:
            call(self._wandb)
        except Exception as e:  # W&B's failure stops W&B, not the run
            self._failed(e, Path(self._wandb_dir or self.run_dir),
                         f"W&B stopped at step {step}: it logs no more records "
                         "(metrics.jsonl has them)")
            self._finish_wandb()

    def _wandb_record(self, record: dict[str, Any], histograms: dict[str, Histogram]) -> dict:
        out = {k: v for k, v in record.items() if k not in histograms}
        for name, hist in histograms.items():
            drawn = to_wandb(hist)
            if drawn is not None:
                out[name] = drawn
        return out

    def log_table(self, key: str, columns: list[str], data: list[list[Any]],
                  step: int) -> str | None:
        """A `wandb.Table` under `key` at `step`; the error in one line when W&B refuses it
        (W&B stays on and nothing stops: an episode sample is not a metric), None when it is
        logged or W&B is off."""
        if self._wandb is None:
            return None
        try:
            import wandb

            table = wandb.Table(columns=list[str | int](columns), data=data)
            self._wandb.log({key: table}, step=step)
        except Exception as e:
            return " ".join(f"{type(e).__name__}: {e}".split())[:200]
        return None

    def log_checkpointed(self, update: dict[str, Any] | None) -> int | None:
        """Log `update`, the newest checkpoint's own record of its update
        (learner/checkpoint_files.py `checkpointed_update`), when metrics.jsonl has no record
        of that update; returns the update logged, or None.

        The learner checkpoints inside its update call, before the launcher has the update's
        metrics, so a launcher killed between the two leaves checkpoint step-N with no record
        of update N, and the resume starts at N + 1. The checkpoint keeps its update's learner
        metrics (`last_update` in `learner_state.json`, learner/loop.py); the record logged
        from them is marked `learner/recovered_from_checkpoint` (the buffer's and actors'
        numbers of that moment are gone). Only the checkpointed update can be missing: the
        launcher asks for update N + 1 only after logging N. Flushing each line alone cannot
        fix it (the record never existed in the launcher), and resuming from the checkpoint
        before would train update N twice."""
        if update is None or self._jsonl is None:
            return None
        version = int(update["metrics"]["version"])
        if version in logged_updates(self._jsonl.path):
            return None
        record, hists = merge_metrics(update, {})
        record["learner/recovered_from_checkpoint"] = 1.0
        self.log(record, step=version, histograms=hists)
        return version

    def console(self, line: str) -> None:
        if self._console:
            print(line, file=sys.stdout, flush=True)

    def close(self) -> None:
        """Close metrics.jsonl and finish W&B; never raises (a failure is `write_failure`)."""
        self._close_jsonl()
        self._finish_wandb()

    def _close_jsonl(self) -> None:
        jsonl, self._jsonl = self._jsonl, None
        if jsonl is None:
            return
        try:
            jsonl.close()
        except OSError as e:
            self._failed(e, jsonl.path, "metrics.jsonl could not be closed: its last records "
                                        "may be missing")

    def _finish_wandb(self) -> None:
        run, self._wandb = self._wandb, None
        if run is None:
            return
        try:
            run.finish()
        except Exception as e:  # W&B writes its offline run under the run directory too
            self._failed(e, Path(self._wandb_dir or self.run_dir),
                         "W&B could not finish its run: its last records may be missing there")

    def _disk_full(self, exc: BaseException, path: Path) -> bool:
        free = _free(path)
        return free is not None and (disk_full(exc, free) or free < _NEARLY_FULL)

    def _failed(self, exc: BaseException, path: Path, stopped: str) -> None:
        """Keep the first failure as `write_failure` (later ones follow from it)."""
        if self._failure is not None:
            return
        free = _free(path)
        room = "free space unknown" if free is None else f"{free:,} bytes free"
        if self._disk_full(exc, path):
            self._failure = f"disk full: {path} ({room}): {stopped}"
        else:
            error = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            self._failure = f"cannot write {path} ({error}; {room}): {stopped}"


def _free(path: Path) -> int | None:
    try:
        return free_bytes(path)
    except OSError:
        return None


METRIC_SECTIONS = ("reward", "env", "eval", "staleness", "is_weight", "learner", "actors", "actor",
                   "buffer", "episodes", "sft")
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

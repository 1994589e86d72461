"""Metrics sinks for a run: W&B (offline when there is no API key), metrics.jsonl, console.

Every logged record is a flat dict of numbers keyed like `reward/mean`, `staleness/max`,
`actor/a0/tokens_per_s`, plus `update` (learner version) and `time` (seconds since start).
The same records go to `RUN_DIR/metrics.jsonl` (one JSON object a line) and to W&B, so
`agent-r1-async report RUN_DIR` can plot a run without W&B. Histograms (staleness, importance
weights, episode lengths by bucket; run/output/histograms.py) are logged to W&B as
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

import contextlib
import errno
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from agent_r1_async.buffers.lengths import WIRE_PREFIX, length_metrics
from agent_r1_async.config import LoggingConfig, RunConfig, config_to_dict
from agent_r1_async.learner.checkpoint_files import complete_checkpoints, disk_full, free_bytes
from agent_r1_async.run.output.histograms import Binned, Hist, to_json, to_wandb

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


class JsonlFile:
    """An append-only JSON-lines file whose lines are on disk as soon as they are written.

    Each line is one write(2) of the whole line to a descriptor opened with O_APPEND and no
    buffer in this process, so a line is in the kernel (page cache) when `write_line` returns:
    a process SIGKILLed right after loses nothing it wrote, and never leaves half a line. A
    write that fails part-way (a full disk) is cut back off the file, so no torn line stays; a
    line torn some other way (the machine lost power) is closed with a newline on opening, so
    the next line starts on a line of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        if self._file.tell() > 0 and not _ends_with_newline(path):
            self._file.write(b"\n")

    def write_line(self, text: str) -> None:
        """Append `text` and a newline; raises OSError (the file is then as it was)."""
        view = memoryview((text + "\n").encode())
        start = os.fstat(self._file.fileno()).st_size
        try:
            while view:
                written = self._file.write(view)
                if not written:
                    raise OSError(errno.EIO, "the write made no progress", str(self.path))
                view = view[written:]
        except OSError:
            with contextlib.suppress(OSError):  # freeing blocks works on a full disk too
                os.ftruncate(self._file.fileno(), start)
            raise

    def close(self) -> None:
        self._file.close()


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def logged_updates(path: Path) -> set[int]:
    """The updates with a training record (one that has `version`) in the metrics file at
    `path`; a line that does not parse is skipped."""
    found: set[int] = set()
    try:
        lines = path.read_text("utf-8", "replace").splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "version" in record:
            found.add(int(record.get("update", 0)))
    return found


class MetricsLogger:
    """Writes metric records to metrics.jsonl (`JsonlFile`: each line on disk when `log`
    returns), W&B and the console.

    Failures: `log`, `log_at_version` and `close` never raise for a sink that cannot write. The
    first failure is `write_failure`, one line naming the file, the bytes free on its
    filesystem and what stopped (`disk full: ...` when the disk or quota is full); that sink is
    then off for the rest of the run (metrics.jsonl never gets a torn line; W&B is not finished
    twice) and the other goes on. The launcher prints the line before its closing lines.

    A resumed run whose last update is missing from metrics.jsonl (`recovered`): the learner
    checkpoints inside its update call, before the launcher has the update's metrics, so a
    launcher killed between the two leaves checkpoint step-N with no record of update N, and
    the resume starts at N + 1. The checkpoint keeps its update's learner metrics
    (`last_update` in `learner_state.json`, learner/loop.py); opening the logger on the run
    directory logs that record when metrics.jsonl lacks it, marked
    `learner/recovered_from_checkpoint` (the buffer's and actors' numbers of that moment are
    gone). Only the checkpointed update can be missing: the launcher asks for update N + 1
    only after logging N. Flushing each line alone cannot fix it (the record never existed in
    the launcher), and resuming from the checkpoint before would train update N twice.
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
        self.recovered: int | None = self._recover_checkpointed_update()
        """The update logged from its checkpoint when opening (see the class docstring)."""

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

    def _recover_checkpointed_update(self) -> int | None:
        """Log the newest checkpoint's update when metrics.jsonl has no record of it (class
        docstring); that update, or None."""
        found = complete_checkpoints(self.run_dir / "checkpoints")
        if not found or self._jsonl is None:
            return None
        try:
            state = json.loads((found[-1] / "learner_state.json").read_text())
            last = state["last_update"]
            version = int(last["metrics"]["version"])
            hist = {int(k): int(v) for k, v in last.get("staleness_hist", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # a checkpoint that keeps no update record: nothing to recover
        if version != int(state.get("version", -1)):
            return None
        if version in logged_updates(self._jsonl.path):
            return None
        record, hists = merge_metrics({"metrics": last["metrics"], "staleness_hist": hist}, {})
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
                "records_per_frame", "episode_bytes_mean"):
        if key in buffer:
            out[f"buffer/{key}"] = buffer[key]
    drops = buffer.get("drops", {})
    for reason, count in drops.items():
        if not reason.startswith(WIRE_PREFIX):
            out[f"buffer/drops/{reason}"] = count
    out.update(length_metrics(drops))  # episodes generated, trained, dropped by length
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
        # Counters that are each actor's totals since it started, summed over the actors.
        for field, prefix in (("env_errors", "env/errors"),
                              ("endpoint_requests", "endpoint/requests")):
            totals: dict[str, int] = {}
            for stats in actors.values():
                for key, n in stats.get(field, {}).items():
                    totals[key] = totals.get(key, 0) + int(n)
            for key, n in totals.items():
                out[f"{prefix}/{key}"] = n
    hist = {int(k): int(v) for k, v in update.get("staleness_hist", {}).items()}
    hists: dict[str, Histogram] = {"staleness/hist": hist}
    weights = update.get("is_weight_hist") or {}
    if weights.get("counts") and len(weights.get("edges", [])) == len(weights["counts"]) + 1:
        hists["is_weight/hist"] = Binned(list(weights["edges"]), list(weights["counts"]))
    return out, hists


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

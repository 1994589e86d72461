"""The launch's console: its own lines, its events, and live progress on a terminal.

Everything the launch says goes through one `Console`:

- `say(line)`   a `[launch] ...` line;
- `event(text)` something that happened to the run (an actor died, a checkpoint was written),
  said once, also appended with a timestamp to `RUN_DIR/logs/events.log`;
- `error(text, log)` one line on stderr with the path of the log that has the details;
- `stage(key, description, total)` / `advance(key, done)` / `finish(key)`: a progress bar
  per stage (warm start steps, held-out evaluation tasks, RL updates with the wall-clock
  budget and an ETA);
- `update(record)` after each RL update: the live panel of the last update.

When stdout is a terminal, the bars and the panel are drawn with `rich` (a `Live` display,
lines scroll above it). Otherwise (CI, `nohup`, a pipe) the console is plain text: stages are
silent and each update prints today's one line (`progress_line`). Third-party output
never reaches it: the other processes write to their own files (run/output/logs.py).

`Events` (run/output/events.py) turns what the supervisor sees into these event lines.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO


class Console:
    """The launch's voice (see module docstring). Thread-safe: child-process messages arrive
    on a reader thread."""

    def __init__(self, log_dir: Path | None = None, live: bool | None = None,
                 per_update: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.per_update = per_update
        self.log_dir = log_dir
        self._lock = threading.RLock()
        self._said: set[str] = set()
        self._stages: dict[str, Any] = {}
        self._rich: _RichView | None = None

    # ------------------------------------------------------------------ lines

    def say(self, line: str) -> None:
        self._print(f"[launch] {line}")

    def print(self, text: str) -> None:
        """A block of the launch's own text (the held-out table), as is."""
        self._print(text)

    def event(self, text: str, key: str | None = None) -> bool:
        """Say `text` once (per `key`, default the text itself); False when already said."""
        key = key or text
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
        self._print(f"[launch] {text}")
        if self.log_dir is not None:
            with contextlib.suppress(OSError):  # a full disk: the console line still stands
                self.log_dir.mkdir(parents=True, exist_ok=True)
                with open(self.log_dir / "events.log", "a") as f:
                    f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        return True

    def error(self, text: str, log: str | Path | None = None) -> None:
        """One line on stderr; the details are in `log`."""
        line = f"[launch] error: {text}" + (f" (full log: {log})" if log else "")
        with self._lock:
            if self._rich is not None:
                self._rich.console.print(line, markup=False, highlight=False, style="red")
            else:
                print(line, file=sys.stderr, flush=True)

    def _print(self, text: str) -> None:
        with self._lock:
            if self._rich is not None:
                self._rich.console.print(text, markup=False, highlight=False)
            else:
                print(text, file=self.stream, flush=True)

    # ------------------------------------------------------------------ progress

    def stage(self, key: str, description: str, total: float | None) -> None:
        """Start a progress bar (terminal only); `total` None = not known yet."""
        if not self.live:
            return
        with self._lock:
            view = self._view()
            if key in self._stages:
                view.progress.update(self._stages[key], description=description, total=total)
            else:
                self._stages[key] = view.progress.add_task(description, total=total, eta="")

    def advance(self, key: str, done: float, total: float | None = None,
                eta: str | None = None, description: str | None = None) -> None:
        if not self.live or key not in self._stages:
            return
        fields: dict[str, Any] = {"completed": done}
        if total is not None:
            fields["total"] = total
        if eta is not None:
            fields["eta"] = eta
        if description is not None:
            fields["description"] = description
        with self._lock:
            assert self._rich is not None
            self._rich.progress.update(self._stages[key], **fields)

    def finish(self, key: str) -> None:
        if not self.live or key not in self._stages:
            return
        with self._lock:
            assert self._rich is not None
            task = self._rich.progress.tasks[self._stages[key]]
            total = task.total or max(task.completed, 1)  # a stage that never knew its size
            self._rich.progress.update(self._stages[key], total=total, completed=total, eta="done")
            self._rich.progress.stop_task(self._stages[key])

    def update(self, record: dict[str, Any], suffix: str = "") -> None:
        """After an RL update: the panel (terminal) or one plain line (+ `suffix`)."""
        if self.live:
            with self._lock:
                self._view().last = record
                self._rich.refresh()  # type: ignore[union-attr]
        elif self.per_update:
            self._print(progress_line(record) + suffix)

    def close(self) -> None:
        with self._lock:
            if self._rich is not None:
                self._rich.stop()
                self._rich = None

    def _view(self) -> _RichView:
        if self._rich is None:
            self._rich = _RichView(self.stream)
        return self._rich


class RlProgress:
    """The RL stage's bar: updates done of `learner.total_updates`, and an ETA that is the
    earlier of the update rate's and the wall-clock budget's (`launch.max_wall_time_s`)."""

    def __init__(self, console: Console, start: int, total: int, budget_s: float,
                 now: Any = time.monotonic) -> None:
        self.console, self.start, self.total, self.budget_s, self.now = console, start, total, budget_s, now
        self.t0 = now()
        console.stage("rl", self._description(), total)
        console.advance("rl", start)

    def _description(self) -> str:
        if not self.budget_s:
            return "RL updates"
        return f"RL updates (budget {clock(self.budget_s - (self.now() - self.t0))} left)"

    def eta_s(self, version: int) -> float | None:
        elapsed = self.now() - self.t0
        done = version - self.start
        by_rate = elapsed / done * (self.total - version) if done > 0 else None
        if not self.budget_s:
            return by_rate
        left = max(0.0, self.budget_s - elapsed)
        return left if by_rate is None else min(by_rate, left)

    def advance(self, version: int) -> None:
        eta = self.eta_s(version)
        self.console.advance("rl", version, eta="" if eta is None else f"ETA {clock(eta)}",
                             description=self._description())

    def out_of_time(self) -> bool:
        return bool(self.budget_s) and self.now() - self.t0 > self.budget_s


def stage_messages(console: Console, cfg: Any) -> Any:
    """`on_message` for the warm-start child (run/processes/child.py): its lines and its steps' bar."""
    if cfg.launch.warm_start and not cfg.model.init_from:
        console.stage("warm-start", "warm start (supervised steps)", None)

    def on_message(msg: tuple) -> None:
        if msg[0] == "progress":
            console.advance("warm-start", msg[1], msg[2])
            if msg[1] >= msg[2]:
                console.finish("warm-start")
        else:
            console.print(msg[1])

    return on_message


def clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


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


def panel_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The last update's key numbers, (label, value) pairs, '-' for what was not logged."""

    def f(key: str, fmt: str = "{:.3f}") -> str:
        v = r.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    drops = sum(v for k, v in r.items() if k.startswith("buffer/drops/") and isinstance(v, (int, float)))
    success = next((k for k in ("env/success", "env/em", "env/accuracy", "env/f1") if k in r), "")
    return [
        ("update", f"v{r.get('version', '?')}"),
        ("reward", f("reward/mean")),
        ("success", f(success) if success else "-"),
        ("staleness mean/max", f"{f('staleness/mean', '{:.2f}')} / {f('staleness/max', '{:.0f}')}"),
        ("IS weight", f("is_weight/mean", "{:.2f}")),
        ("gen tok/s", f("actors/tokens_per_s", "{:.0f}")),
        ("learner s/update", f("learner/update_time_s", "{:.1f}")),
        ("learner idle", f("learner/idle_ratio", "{:.0%}")),
        ("buffer ready/dropped", f"{f('buffer/groups_ready', '{:.0f}')} / {drops:.0f}"),
    ]


class _RichView:
    """rich's Live display: the stage bars above a small table of the last update."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console as RichConsole
        from rich.console import Group
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = RichConsole(file=stream, force_terminal=True, highlight=False)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), _eta_column(), console=self.console)
        self.last: dict[str, Any] | None = None
        outer = self

        class _Panel:
            def __rich__(self) -> Any:
                return outer.panel()

        self.live = Live(Group(self.progress, _Panel()), console=self.console,
                         refresh_per_second=4, redirect_stdout=True, redirect_stderr=False)
        self.live.start()

    def panel(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        if self.last is None:
            return ""
        table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        rows = panel_rows(self.last)
        for i in range(0, len(rows), 3):  # three label/value pairs a row: a compact panel
            cells: list[Text] = []
            for label, value in rows[i:i + 3]:  # Text, not markup: lines printed with
                cells += [Text(label, style="dim"), Text(value)]  # markup off re-render it
            table.add_row(*cells)
        return table

    def refresh(self) -> None:
        self.live.refresh()

    def stop(self) -> None:
        self.live.stop()


def _eta_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        """The stage's own ETA when it set one (RL: the earlier of the update rate's and the
        wall-clock budget's), else rich's estimate from the rate so far."""

        def render(self, task: Any) -> Text:
            eta = task.fields.get("eta") or ""
            if not eta and task.time_remaining is not None and not task.finished:
                eta = f"ETA {clock(task.time_remaining)}"
            return Text(eta, style="cyan")

    return EtaColumn()


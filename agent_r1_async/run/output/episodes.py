"""Episode samples on disk and in W&B: `RUN_DIR/episodes/update-N.jsonl`, table `episodes/sample`.

The learner samples episodes every `logging.episodes_every` updates (learner/episode_sample.py)
and hands the rows back with the update's metrics. `EpisodeLog.write` adds what the text
says about tools (`enrich`: the action's `<tool_call>` blocks as name and arguments, the
`<tool_response>` blocks of what came back), then:

- writes `RUN_DIR/episodes/update-N.jsonl`, one JSON object per step, at most
  `MAX_FILE_BYTES` (whole rows; a sample cut there says so in its last row's `cut`), through
  a temporary file renamed into place, and keeps the newest `logging.episodes_keep` files;
- logs the same rows as the W&B table `episodes/sample` at the update's step, one row per
  step with `TABLE_COLUMNS` (lists and dicts as JSON text).

A failure of either (a full disk, W&B refusing the table) is one console line, said once per
sink, and stops nothing: the run, its metrics and the other sink go on.
`agent-r1-async episodes RUN_DIR` reads the files back (run/output/episode_view.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agent_r1_async.actors.endpoint.toolcalls import split_tool_calls

EPISODES_DIR = "episodes"
TABLE_KEY = "episodes/sample"
MAX_FILE_BYTES = 4 << 20
"""Most bytes of one sample file: the rows past it are left out (whole rows)."""
TABLE_COLUMNS = [
    "update", "episode_id", "group_id", "pick", "step", "num_steps", "context_tail", "action",
    "tool_calls", "tool_results", "observation", "process_reward", "advantage", "versions",
    "staleness", "is_weight_mean", "is_weight_max", "is_weight_min", "finish_reason",
    "outcome_reward", "return", "status", "error", "canaries", "task_id", "env_name",
]
"""The W&B table's columns, in order (the jsonl rows have these and `metrics`, `actor_id`,
`context_tokens`, `action_tokens`, `num_tool_calls`)."""

_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_FILE = re.compile(r"^update-(\d+)\.jsonl$")


def enrich(row: dict[str, Any]) -> dict[str, Any]:
    """The row with `tool_calls` ([{name, arguments}] parsed from its action) and
    `tool_results` (the `<tool_response>` blocks of its observation)."""
    _, calls = split_tool_calls(str(row.get("action", "")))
    return {**row,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
            "tool_results": _RESPONSE.findall(str(row.get("observation", "")))}


def sample_files(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(update, path) of the run's sample files, oldest first."""
    folder = Path(run_dir) / EPISODES_DIR
    found = []
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            m = _FILE.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
    return sorted(found)


def table_cell(value: Any) -> Any:
    """A W&B table cell: numbers and text as they are, lists and dicts as JSON text."""
    if value is None or isinstance(value, str | int | float):
        return value
    return json.dumps(value, ensure_ascii=False)


def _lines(rows: Iterable[dict[str, Any]], limit: int) -> list[str]:
    """JSON lines of `rows` within `limit` bytes; a cut marks the last one kept."""
    rows = list(rows)
    out: list[str] = []
    size = 0
    for i, row in enumerate(rows):
        line = json.dumps(row, ensure_ascii=False)
        if size + len(line.encode()) + 1 > limit and out:
            last = json.loads(out[-1])
            last["cut"] = f"{len(rows) - i} more steps past {limit} bytes"
            out[-1] = json.dumps(last, ensure_ascii=False)
            break
        out.append(line)
        size += len(line.encode()) + 1
    return out


class EpisodeLog:
    """Writes the learner's episode samples to RUN_DIR/episodes/ and to a W&B table."""

    def __init__(self, run_dir: str | Path, keep: int,
                 log_table: Callable[[str, list[str], list[list[Any]], int], str | None],
                 say_once: Callable[[str, str], Any]) -> None:
        """`log_table`: `MetricsLogger.log_table`; `say_once(text, key)`: the console's
        one-time line (`Console.event`)."""
        self.folder = Path(run_dir) / EPISODES_DIR
        self.keep = keep
        self._log_table = log_table
        self._say_once = say_once

    def write(self, rows: list[dict[str, Any]], step: int) -> Path | None:
        """Both sinks; the file written, or None (no rows, or it failed: said once)."""
        if not rows:
            return None
        rows = [enrich(r) for r in rows]
        update = int(rows[0].get("update", step))
        path = self._write_file(rows, update)
        failure = self._log_table(TABLE_KEY, TABLE_COLUMNS,
                                  [[table_cell(r.get(c)) for c in TABLE_COLUMNS] for r in rows],
                                  step)
        if failure:
            self._say_once(f"episode samples: W&B did not take the table of update {update} "
                           f"({failure}); the run goes on", "episodes-wandb")
        return path

    def _write_file(self, rows: list[dict[str, Any]], update: int) -> Path | None:
        path = self.folder / f"update-{update}.jsonl"
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text("".join(line + "\n" for line in _lines(rows, MAX_FILE_BYTES)))
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._say_once(f"episode samples: cannot write {path} "
                           f"({' '.join(str(e).split())[:160]}); the run goes on",
                           "episodes-file")
            return None
        self._prune()
        return path

    def _prune(self) -> None:
        """Keep the newest `keep` sample files (0: all)."""
        if self.keep <= 0:
            return
        for _, old in sample_files(self.folder.parent)[:-self.keep]:
            with contextlib.suppress(OSError):
                old.unlink()

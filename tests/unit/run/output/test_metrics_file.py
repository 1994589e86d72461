"""metrics.jsonl's one reader (run/output/metrics_file.py), as each caller reads the file: the
report keeps every record and tolerates only a torn last line; the launch's "which updates are
logged" skips any line that does not parse, and counts training records only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_r1_async.run.output.metrics_file import (
    last_logged_update,
    logged_updates,
    read_records,
)
from agent_r1_async.run.output.report import read_metrics


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_a_torn_last_line_is_skipped_and_a_torn_middle_line_raises(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write(path, json.dumps({"update": 1, "version": 1}), "", json.dumps({"update": 0}))
    with open(path, "a") as f:
        f.write('{"update": 2, "ver')  # the writer is mid-line
    assert read_records(path) == [{"update": 1, "version": 1}, {"update": 0}]
    assert read_metrics(tmp_path) == read_records(path)
    _write(path, json.dumps({"update": 1}), '{"upd', json.dumps({"update": 3}))
    with pytest.raises(json.JSONDecodeError):
        read_records(path)
    assert read_records(path, skip_unparsed=True) == [{"update": 1}, {"update": 3}]


def test_the_updates_logged_are_those_with_a_training_record(tmp_path):
    path = _write(tmp_path / "metrics.jsonl", json.dumps({"update": 0, "eval/before/em": 0.1}),
                  json.dumps({"update": 1, "version": 1}), '{"upd',
                  json.dumps({"update": 4, "version": 4}), "[1, 2]")
    assert logged_updates(path) == {1, 4}
    assert last_logged_update(path) == 4
    assert logged_updates(tmp_path / "missing.jsonl") == set()
    assert last_logged_update(tmp_path / "missing.jsonl") == 0
    with pytest.raises(FileNotFoundError, match=r"is .* a run directory"):
        read_metrics(tmp_path / "nowhere")

"""RUN_DIR/startup.json (run/output/startup.py): each phase once, in order, rewritten as it goes."""

from __future__ import annotations

import json

import pytest

from agent_r1_async.run.output import startup
from agent_r1_async.run.output.startup import StartupClock


def test_phases_are_written_in_order_once_each(tmp_path, monkeypatch):
    now = iter([101.5, 103.0, 110.25])
    monkeypatch.setattr(startup.time, "time", lambda: next(now))
    clock = StartupClock(started=100.0)
    clock.mark("preflight")  # before the run directory exists: kept, written later
    clock.write_to(tmp_path)
    assert json.loads((tmp_path / "startup.json").read_text()) == {
        "started": 100.0, "phases": [["preflight", 101.5]]}
    clock.mark("ray")
    clock.mark("ray")  # a second mark of a phase does not move it
    clock.mark("first update")
    data = json.loads((tmp_path / "startup.json").read_text())
    assert data["phases"] == [["preflight", 101.5], ["ray", 103.0], ["first update", 110.25]]
    assert clock.seconds() == pytest.approx({"preflight": 1.5, "ray": 3.0, "first update": 10.25})


def test_an_unwritable_run_dir_does_not_fail_the_launch(tmp_path):
    clock = StartupClock()
    clock.write_to(tmp_path / "missing")  # no such directory: the record is skipped
    clock.mark("preflight")
    assert list(clock.seconds()) == ["preflight"]

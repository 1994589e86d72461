"""What a SIGKILLed launch leaves of its local Ray is ended by `--resume`: each recorded
process by its pid and start time, never a process that merely reuses a recorded pid, and
nothing while the recorded launcher still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from agent_r1_async.run.processes.leftovers import (
    RECORD,
    forget_local_ray,
    reap_left_behind,
    record_local_ray,
)

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_resume_ends_the_recorded_processes_of_a_dead_launcher(tmp_path: Path):
    temp = tmp_path / "ar1-ray-x"
    temp.mkdir()
    agent = subprocess.Popen(SLEEP)  # a Ray agent that outlived its launcher
    bystander = subprocess.Popen(SLEEP)  # a process whose pid was recorded for another start
    launcher = subprocess.Popen([sys.executable, "-c", "pass"])
    launcher.wait()  # the launcher is gone
    try:
        record = {
            "launcher": {"pid": launcher.pid, "start": 0.0},
            "processes": [
                {"pid": agent.pid, "start": psutil.Process(agent.pid).create_time(),
                 "name": "dashboard_agent"},
                {"pid": bystander.pid, "start": 12.0, "name": "raylet"},
            ],
            "temp_dir": str(temp)}
        (tmp_path / RECORD).write_text(json.dumps(record))
        assert reap_left_behind(tmp_path) == [f"dashboard_agent (pid {agent.pid})"]
        agent.wait(10)  # ended (psutil reaped its status already)
        assert agent.returncode is not None and bystander.poll() is None
        assert not temp.exists() and not (tmp_path / RECORD).exists()
        assert reap_left_behind(tmp_path) == []  # nothing recorded any more
    finally:
        for p in (agent, bystander):
            p.kill()
            p.wait()


def test_nothing_is_ended_while_the_recorded_launcher_runs(tmp_path: Path):
    child = subprocess.Popen(SLEEP)
    try:
        record_local_ray(tmp_path, None)  # this test process is the launcher
        record = json.loads((tmp_path / RECORD).read_text())
        assert record["launcher"]["pid"] == os.getpid()
        assert child.pid in [p["pid"] for p in record["processes"]]
        assert reap_left_behind(tmp_path) == [] and child.poll() is None
        forget_local_ray(tmp_path)
        assert not (tmp_path / RECORD).exists()
        forget_local_ray(tmp_path)  # twice is fine
    finally:
        child.kill()
        child.wait()

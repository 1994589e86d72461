"""Per-process log files (run/output/logs.py): everything a process writes reaches its own
file, a file past its size rotates while its writers go on, the launch follows a log as it
grows and reads a dead process's last exception, and its traceback log never fails the
launch's one error line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent_r1_async.run.output.logs import LogFollower, bound, log_exception, tail_error

ROOT = Path(__file__).resolve().parents[4]


def test_log_exception_appends_the_traceback_and_returns_its_path(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "launch.log"
    try:
        raise ValueError("boom")
    except ValueError:
        assert log_exception(log) == log
    text = log.read_text()
    assert " launch failed:\nTraceback (most recent call last):" in text
    assert text.rstrip().endswith("ValueError: boom")


def test_log_exception_on_a_full_disk_returns_none_and_does_not_raise(tmp_path: Path) -> None:
    (tmp_path / "launch.log").symlink_to("/dev/full")  # every write: ENOSPC
    try:
        raise ValueError("boom")
    except ValueError:
        assert log_exception(tmp_path / "launch.log") is None


def test_log_follower_reads_appended_lines_once_and_follows_rotation(tmp_path: Path):
    path = tmp_path / "actor-0.log"
    follower = LogFollower(path)
    assert follower.new_lines() == []  # not there yet
    path.write_text("one\ntw")
    assert follower.new_lines() == ["one"]  # an unfinished line waits for its end
    with open(path, "a") as f:
        f.write("o\nthree\n")
    assert follower.new_lines() == ["two", "three"]
    assert follower.new_lines() == []
    path.write_text("new\n")  # rotated (run/output/logs.py): shorter than what was read
    assert follower.new_lines() == ["new"]


def test_tail_error_reads_the_last_traceback(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Traceback (most recent call last):\n  File \"a\"\nKeyError: 'a'\nlater\n"
                   "Traceback (most recent call last):\n  File \"b\"\n    x()\n"
                   "RuntimeError: second\n")
    assert tail_error(log) == "RuntimeError: second"
    log.write_text("no traceback here\n")
    assert tail_error(log) is None
    assert tail_error(tmp_path / "missing.log") is None


def test_redirect_output_catches_prints_warnings_logging_and_children(tmp_path: Path) -> None:
    script = (
        "import logging, os, sys, warnings\n"
        "from agent_r1_async.run.output.logs import redirect_output\n"
        f"redirect_output({str(tmp_path / 'logs' / 'actor-0.log')!r})\n"
        "print('a print'); warnings.warn('a warning', FutureWarning)\n"
        "logging.getLogger('vllm').info('an info record')\n"
        "os.write(2, b'raw fd 2\\n'); os.system('echo from a child process')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""  # nothing on the console
    text = (tmp_path / "logs" / "actor-0.log").read_text()
    for piece in ("actor-0 pid ", "a print", "FutureWarning: a warning", "INFO vllm: an info record",
                  "raw fd 2", "from a child process"):
        assert piece in text, piece


def test_bound_rotates_a_log_past_its_size_and_writers_continue(tmp_path: Path) -> None:
    path = tmp_path / "learner-0.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"x" * 100)
    assert not bound(path, max_bytes=100)
    os.write(fd, b"y")
    assert bound(path, max_bytes=100)
    os.write(fd, b"after\n")  # O_APPEND: lands at the new end, offset 0
    os.close(fd)
    assert path.read_bytes() == b"after\n"
    assert (tmp_path / "learner-0.log.1").read_bytes() == b"x" * 100 + b"y"

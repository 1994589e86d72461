"""run/output/logs.py: the launch's traceback log never fails the launch's one error line."""

from __future__ import annotations

from pathlib import Path

from agent_r1_async.run.output.logs import log_exception


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

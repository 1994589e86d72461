"""A full disk said plainly (agent_r1_async/disk.py): found behind Ray's task errors, and any
error that is a full disk as one line naming where and the bytes free."""

from __future__ import annotations

import errno

import ray.exceptions as rex

from agent_r1_async import disk
from agent_r1_async.disk import DiskFullError, disk_full_message


def test_a_full_disk_behind_rays_task_error_is_found():
    full = DiskFullError("disk full: checkpoint step-4 could not be written under /r")
    wrapped = rex.RayTaskError("update", "Traceback (most recent call last): ...", full)
    assert disk_full_message(wrapped) == str(full)
    assert disk_full_message(wrapped.as_instanceof_cause()) == str(full)
    assert disk_full_message(rex.RayTaskError("update", "tb", ValueError("x"))) is None
    assert disk_full_message(ValueError("disk full")) is None


def test_a_full_disk_anywhere_is_one_line_naming_the_file_and_the_free_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda path: 4096)
    err = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "logs" / "learner-0.log"))
    line = disk.disk_full_line(RuntimeError("wrapped"), tmp_path)
    assert line is None  # not a full disk
    wrapped = RuntimeError("remote task failed")
    wrapped.cause = err  # how Ray's task errors carry the remote exception
    assert disk.disk_full_line(wrapped, tmp_path) == (
        f"disk full: {tmp_path}/logs/learner-0.log (4,096 bytes free on that filesystem)")
    # Without a file name the run directory stands for where it was.
    bare = OSError(errno.ENOSPC, "No space left on device")
    assert disk.disk_full_line(bare, tmp_path) == (
        f"disk full: {tmp_path} (4,096 bytes free on that filesystem)")

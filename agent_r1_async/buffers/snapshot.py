"""Snapshots of the buffer state on disk: msgspec MessagePack, written atomically.

One file, `buffer.snapshot`, in the snapshot directory. A write goes to a temporary file in
the same directory, is fsync'ed, renamed over the old snapshot (atomic on POSIX), and the
directory is fsync'ed, so a crash at any point leaves either the old or the new snapshot,
never a torn one. The file starts with a schema-versioned header struct, so a snapshot from an
incompatible version is refused with a clear error instead of being misread.
"""

from __future__ import annotations

import os
import tempfile

import msgspec

from agent_r1_async.buffers.buffer import BufferState
from agent_r1_async.wire import messages as m

SNAPSHOT_FILE = "buffer.snapshot"
SNAPSHOT_SCHEMA = 2  # 2: packed token ids and log-probs (messages.SCHEMA_VERSION 2)


class SnapshotError(RuntimeError):
    """A snapshot file that exists but cannot be used."""


class _Snapshot(msgspec.Struct, array_like=True, gc=False):
    schema: int
    state: BufferState


def save_snapshot(directory: str, state: BufferState) -> str:
    """Atomically write `state` to `directory`/buffer.snapshot; returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SNAPSHOT_FILE)
    data = msgspec.msgpack.encode(_Snapshot(SNAPSHOT_SCHEMA, state), enc_hook=m.enc_hook)
    fd, tmp = tempfile.mkstemp(prefix=".buffer.snapshot.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load_snapshot(directory: str) -> BufferState | None:
    """The snapshot in `directory`, or None if there is none."""
    path = os.path.join(directory, SNAPSHOT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    try:
        snap = msgspec.msgpack.decode(data, type=_Snapshot, dec_hook=m.dec_hook)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotError(f"{path}: not a readable buffer snapshot ({e})") from None
    if snap.schema != SNAPSHOT_SCHEMA:
        raise SnapshotError(f"{path}: snapshot schema {snap.schema}, expected {SNAPSHOT_SCHEMA}")
    return snap.state

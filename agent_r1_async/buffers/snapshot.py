"""Snapshots of the buffer state on disk: msgspec MessagePack, checksummed, the previous kept.

Three files in the snapshot directory (`RUN_DIR/buffer`):

    buffer.snapshot            the newest snapshot
    buffer.snapshot.prev       the one before it
    buffer.manifest.json       size and SHA-256 of each, with what each holds (groups ready
                               and assembling, learner version, wall time written)

A write (`save_snapshot`): the bytes go to a temporary file in the same directory, which is
fsync'ed; the current snapshot is renamed to `.prev` and the temporary file to
`buffer.snapshot` (renames within one directory are atomic on POSIX); then the manifest is
written the same way (temporary file, fsync, rename), *last*; then the directory is fsync'ed.
The manifest lists the new snapshot (from the bytes just written) and the previous one (its
entry carried over from the old manifest).

A snapshot is intact when its bytes match an entry of the manifest: same size and SHA-256.
Entries are matched by checksum, not by file name, so every crash point leaves a usable file:

- before the renames: the old pair and its manifest stand;
- between the renames and the manifest: the new `buffer.snapshot` is in no manifest entry
  (skipped: the snapshot counts only once its manifest says so), and the old one, now
  `buffer.snapshot.prev`, matches its entry in the old manifest (listed under its old name);
- after the manifest: the new pair.

Loading (`restore_snapshot`) tries the newest, then the previous. A file that matches no
entry (cut short, overwritten, a flipped byte: "checksum mismatch"), that does not decode
(a garbage file makes msgspec raise `DecodeError`, `ValidationError`, `UnicodeDecodeError`,
`ValueError`, ...: every exception of the decoder counts), that an older or newer version wrote
(another `SNAPSHOT_SCHEMA`), or that the caller's `restore` refuses is named with its path and
reason and skipped; when none is usable the buffer starts empty. Nothing a file holds can stop
the buffer from starting. `SnapshotReport` says which file was restored and which were
skipped, with what the skipped newer ones held per the manifest (what the fallback lost);
`SnapshotReport.line()` is the launch's console line.

A directory without a manifest (snapshots written before manifests existed) or with an
unreadable one: a snapshot that decodes is restored *unverified*, and the report says so.

Why a manifest beside the files rather than a header inside each: the manifest is written only
after the snapshot is in place under its name, so it vouches for exactly the bytes a restart
will read, and it keeps what each snapshot held (groups, version, time) readable even when the
snapshot itself is not, which is how a fallback can say what it lost. SHA-256 because x86 and
ARM hash it in hardware (about 1 GB/s here, twice blake2b's speed): a snapshot at
`buffer.max_bytes` (1 GiB) costs about 1 s more to write, a tiny run's a few milliseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agent_r1_async.buffers.state import BufferState
from agent_r1_async.wire import messages as m

SNAPSHOT_FILE = "buffer.snapshot"
PREVIOUS_FILE = "buffer.snapshot.prev"
MANIFEST_FILE = "buffer.manifest.json"
SNAPSHOT_SCHEMA = 3
"""2: packed token ids and log-probs (messages.SCHEMA_VERSION 2). 3: delta step records
(messages.SCHEMA_VERSION 4). A schema-2 snapshot reads as schema 3 (its records are whole)."""
_READABLE_SCHEMAS = (2, SNAPSHOT_SCHEMA)
_MANIFEST_FORMAT = 1


class SnapshotError(RuntimeError):
    """A snapshot file that exists but cannot be used; the message is the reason."""


class _Snapshot(msgspec.Struct, array_like=True, gc=False):
    schema: int
    state: BufferState


class Entry(msgspec.Struct, frozen=True):
    """One snapshot as the manifest records it."""

    file: str
    size: int
    sha256: str
    written_at: float
    version: int
    groups: int
    """Groups ready (stored, not yet sampled out)."""
    assembling: int
    """Groups still being assembled."""

    def holds(self) -> str:
        return (f"{self.groups} groups ready, {self.assembling} assembling, version "
                f"{self.version}, written at {_when(self.written_at)}")


class _Manifest(msgspec.Struct):
    format: int
    hash: str
    snapshots: list[Entry]


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str
    entry: Entry | None = None
    """What the manifest says this file held, when it has an entry under its name."""


@dataclass
class SnapshotReport:
    """What a buffer start restored from `directory`, and what it skipped on the way."""

    directory: str
    restored_from: str | None = None
    restored: Entry | None = None
    """What the restored snapshot holds (its manifest entry; for an unverified one, read from
    the state itself, with the file's mtime as the time written)."""
    unverified: str = ""
    """Why the restored snapshot could not be checked ("" when it was)."""
    skipped: list[Skipped] = field(default_factory=list)

    def lost(self) -> str:
        """What the skipped newer snapshot held, per the manifest ("" when unknown)."""
        newest = next((s.entry for s in self.skipped if s.entry is not None), None)
        if newest is None:
            return ""
        if self.restored is not None and self.restored.written_at < newest.written_at:
            gap = newest.written_at - self.restored.written_at
            return (f"; lost: what the buffer accepted in the {gap:.0f} s between the two "
                    f"(the corrupt one held {newest.holds()})")
        return f"; lost: the corrupt one held {newest.holds()}"

    def line(self) -> str | None:
        """The console's line when a snapshot was skipped or is unverified, else None."""
        if not self.skipped and not self.unverified:
            return None
        said = [f"snapshot {s.path} is corrupt ({s.reason})" for s in self.skipped]
        if self.restored_from is None:
            return "buffer: " + "; ".join(
                [*said, "no intact snapshot: the buffer starts empty"]) + self.lost()
        holds = f" ({self.restored.holds()})" if self.restored is not None else ""
        if self.unverified:
            holds += f", unverified: {self.unverified}"
        what = "the previous one" if self.skipped else "snapshot"
        return "buffer: " + "; ".join(
            [*said, f"restored {what} {self.restored_from}{holds}"]) + self.lost()


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsynced_temp(directory: str, name: str, data: bytes) -> str:
    """`data` in a new temporary file beside `name`, on disk (fsync'ed); its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _rename_into_place(tmp: str, path: str, previous: str | None = None) -> None:
    """Rename `tmp` to `path`, first moving what is at `path` to `previous` (if given)."""
    try:
        if previous is not None and os.path.exists(path):
            os.replace(path, previous)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync_dir(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_manifest(directory: str) -> list[Entry] | None:
    """The manifest's entries; None when there is none or it does not parse as one."""
    try:
        with open(os.path.join(directory, MANIFEST_FILE), "rb") as f:
            return msgspec.json.decode(f.read(), type=_Manifest).snapshots
    except Exception:  # missing, unreadable, not JSON, not our shape: no manifest
        return None


def _manifest_bytes(entries: list[Entry]) -> bytes:
    return msgspec.json.format(msgspec.json.encode(
        _Manifest(_MANIFEST_FORMAT, "sha256", entries)), indent=1)


def save_snapshot(directory: str, state: BufferState) -> str:
    """Write `state` as `directory`/buffer.snapshot, keeping the previous one as
    buffer.snapshot.prev, then the manifest (module docstring); returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SNAPSHOT_FILE)
    data = msgspec.msgpack.encode(_Snapshot(SNAPSHOT_SCHEMA, state), enc_hook=m.enc_hook)
    entry = Entry(SNAPSHOT_FILE, len(data), _sha256(data), time.time(), state.learner_version,
                  len(state.stored), len(state.assembling))
    old = {e.file: e for e in read_manifest(directory) or []}
    entries = [entry]
    if os.path.exists(path) and SNAPSHOT_FILE in old:  # what becomes .prev held when written
        entries.append(msgspec.structs.replace(old[SNAPSHOT_FILE], file=PREVIOUS_FILE))
    _rename_into_place(_fsynced_temp(directory, SNAPSHOT_FILE, data), path,
                       previous=os.path.join(directory, PREVIOUS_FILE))
    manifest = os.path.join(directory, MANIFEST_FILE)
    _rename_into_place(_fsynced_temp(directory, MANIFEST_FILE, _manifest_bytes(entries)),
                       manifest)
    _fsync_dir(directory)
    return path


def _mismatch(name: str, size: int, entries: list[Entry]) -> str:
    """Why a file that matches no manifest entry is not intact."""
    mine = next((e for e in entries if e.file == name), None)
    if mine is None:
        return ("not in the manifest (a write cut short before its manifest, or a file the "
                "buffer did not write)")
    if size < mine.size:
        return f"truncated: {size:,} of {mine.size:,} bytes"
    if size > mine.size:
        return f"{size:,} bytes, the manifest records {mine.size:,}"
    return "checksum mismatch"


def _decode(data: bytes) -> BufferState:
    try:
        snap = msgspec.msgpack.decode(data, type=_Snapshot, dec_hook=m.dec_hook)
    except Exception as e:  # whatever garbage makes the decoder raise: not a snapshot
        raise SnapshotError(f"does not decode: {type(e).__name__}: {str(e)[:160]}") from None
    if snap.schema not in _READABLE_SCHEMAS:
        raise SnapshotError(f"snapshot schema {snap.schema}, this version reads "
                            f"{SNAPSHOT_SCHEMA}")
    return snap.state


def read_snapshot(path: str, entries: list[Entry] | None) -> tuple[BufferState, Entry]:
    """The state in `path` and what it holds: its manifest entry, or, without a manifest
    (`entries` None: unverified), one read from the state. Raises `SnapshotError` with the
    reason the file cannot be used."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            mtime = os.fstat(f.fileno()).st_mtime
    except OSError as e:
        raise SnapshotError(f"unreadable: {e.strerror or e}") from None
    if entries is None:
        state = _decode(data)
        return state, Entry(os.path.basename(path), len(data), "", mtime, state.learner_version,
                            len(state.stored), len(state.assembling))
    digest = _sha256(data)
    entry = next((e for e in entries if e.size == len(data) and e.sha256 == digest), None)
    if entry is None:
        raise SnapshotError(_mismatch(os.path.basename(path), len(data), entries))
    return _decode(data), entry


def restore_snapshot(directory: str,
                     restore: Callable[[BufferState], Any]) -> SnapshotReport:
    """Hand the newest usable snapshot in `directory` to `restore` (which may raise: that
    snapshot is then skipped too); the report of what was restored and skipped. Never raises
    for a bad file: with none usable nothing is restored."""
    report = SnapshotReport(directory)
    entries = read_manifest(directory)
    for name in (SNAPSHOT_FILE, PREVIOUS_FILE):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        named = next((e for e in entries or [] if e.file == name), None)
        try:
            state, entry = read_snapshot(path, entries)
            restore(state)
        except SnapshotError as e:
            report.skipped.append(Skipped(path, str(e), named))
            continue
        except Exception as e:  # the buffer refused what decoded
            report.skipped.append(
                Skipped(path, f"restore failed: {type(e).__name__}: {str(e)[:160]}", named))
            continue
        report.restored_from, report.restored = path, entry
        if entries is None:
            why = ("unreadable" if os.path.exists(os.path.join(directory, MANIFEST_FILE))
                   else "written before snapshots had one")
            report.unverified = f"no usable {MANIFEST_FILE} ({why})"
        break
    return report


def load_snapshot(directory: str) -> BufferState | None:
    """The state of the newest usable snapshot in `directory` (what a buffer starting there
    restores), or None if there is none."""
    found: list[BufferState] = []
    restore_snapshot(directory, found.append)
    return found[0] if found else None

"""Buffer snapshots (buffers/snapshot.py): the previous one kept, a manifest written last, and
a corrupt snapshot skipped for the previous intact one, or an empty buffer, never a buffer
that cannot start.

The corruptions are those a disk, a crash or a stray writer leave: a string whose bytes are no
longer UTF-8 (a launch's restarted buffer died on it with `UnicodeDecodeError: 'utf-8' codec
can't decode byte 0x9a`), a file cut short, a flipped byte (a checksum mismatch), random bytes.
Every state is built by a real `EpisodeBuffer` from granted, completed groups, so the group
counts below are what each snapshot holds.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import msgspec
import pytest

from agent_r1_async.buffers import snapshot
from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.state import BufferState
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.inproc import InProcTransport
from tests.fakes.clock import FakeClock
from tests.fakes.records import episode_records, group_records
from tests.fakes.services import buffer_service

ALGO = AlgorithmConfig(group_size=2, batch_groups=8)


def _buffer() -> EpisodeBuffer:
    return EpisodeBuffer(BufferConfig(spi_tolerance=100.0), ALGO, FakeClock())


def _state(ready: int, assembling: int = 0) -> BufferState:
    """A buffer's state with `ready` complete groups and `assembling` groups with one of
    their two episodes ended."""
    buf = _buffer()
    gids = buf.grant("a0", ready + assembling).group_ids
    for gid in gids[:ready]:
        for r in group_records(gid, [0.0, 1.0]):
            buf.ingest(r)
    for gid in gids[ready:]:
        for r in episode_records(f"{gid}-e0", gid):
            buf.ingest(r)
    state = buf.state()
    assert (len(state.stored), len(state.assembling)) == (ready, assembling)
    return state


def _restored(directory: Path) -> tuple[EpisodeBuffer, snapshot.SnapshotReport]:
    """A fresh buffer restored the way the service restores one, and the report."""
    holder: list[EpisodeBuffer] = []

    def restore(state: BufferState) -> None:
        buf = _buffer()
        buf.restore(state)
        holder.append(buf)

    report = snapshot.restore_snapshot(str(directory), restore)
    return (holder[-1] if holder else _buffer()), report


def _non_utf8(data: bytes) -> bytes:
    """`data` with the first byte of its first group id replaced by 0x9a: still msgpack of
    the right shape, but that string is no longer UTF-8."""
    snap = msgspec.msgpack.decode(data, type=snapshot._Snapshot, dec_hook=m.dec_hook)
    gid = msgspec.msgpack.encode(snap.state.stored[0].group.group_id)  # header + UTF-8
    at = data.index(gid) + len(gid) - len(snap.state.stored[0].group.group_id)
    return data[:at] + b"\x9a" + data[at + 1:]


NON_UTF8 = (r"^(UnicodeDecodeError: 'utf-8' codec can't decode byte 0x9a|"
            r"DecodeError: Invalid UTF-8 encoded string)")
"""How msgspec names those bytes: up to 0.22 a UnicodeDecodeError (not one of its own
errors), from 0.23 its own DecodeError; the loader must take either."""


def test_the_bytes_of_the_drill_do_not_decode_in_msgspec(tmp_path):
    """The test's corruption is the drill's: msgspec refuses those bytes with an error that,
    up to msgspec 0.22, is not one of its own (UnicodeDecodeError) and escaped the old
    `SnapshotError` path."""
    snapshot.save_snapshot(str(tmp_path), _state(2))
    bad = _non_utf8((tmp_path / snapshot.SNAPSHOT_FILE).read_bytes())
    with pytest.raises((UnicodeDecodeError, msgspec.DecodeError)) as err:
        msgspec.msgpack.decode(bad, type=snapshot._Snapshot, dec_hook=m.dec_hook)
    assert re.match(NON_UTF8, f"{type(err.value).__name__}: {err.value}")


def test_a_new_snapshot_keeps_the_previous_one_and_a_manifest_of_both(tmp_path):
    first, second = _state(2, 1), _state(3)
    snapshot.save_snapshot(str(tmp_path), first)
    path = snapshot.save_snapshot(str(tmp_path), second)
    assert path == str(tmp_path / "buffer.snapshot")
    assert sorted(os.listdir(tmp_path)) == ["buffer.manifest.json", "buffer.snapshot",
                                            "buffer.snapshot.prev"]
    doc = json.loads((tmp_path / "buffer.manifest.json").read_text())
    assert doc["hash"] == "sha256"
    (new, old) = doc["snapshots"]
    assert (new["file"], new["groups"], new["assembling"]) == ("buffer.snapshot", 3, 0)
    assert (old["file"], old["groups"], old["assembling"]) == ("buffer.snapshot.prev", 2, 1)
    assert new["size"] == (tmp_path / "buffer.snapshot").stat().st_size
    assert old["size"] == (tmp_path / "buffer.snapshot.prev").stat().st_size
    buf, report = _restored(tmp_path)
    assert len(buf.store) == 3 and report.line() is None and not report.skipped
    assert report.restored_from == str(tmp_path / "buffer.snapshot")


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "non_utf8":
        path.write_bytes(_non_utf8(data))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped_byte":  # still decodes: only the checksum tells
        at = data.index(b"task-") + len(b"task-")
        path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    elif how == "garbage":
        path.write_bytes(os.urandom(len(data)))


REASONS = {
    "non_utf8": "checksum mismatch",
    "truncated": "truncated: {half:,} of {size:,} bytes",
    "flipped_byte": "checksum mismatch",
    "garbage": "checksum mismatch",
}


@pytest.mark.parametrize("how", list(REASONS))
def test_a_corrupt_snapshot_is_skipped_for_the_previous_intact_one(tmp_path, how):
    snapshot.save_snapshot(str(tmp_path), _state(2, 1))  # becomes .prev: 2 ready, 1 assembling
    snapshot.save_snapshot(str(tmp_path), _state(5))
    newest = tmp_path / "buffer.snapshot"
    size = newest.stat().st_size
    _corrupt(newest, how)

    buf, report = _restored(tmp_path)
    assert (len(buf.store), buf.assembler.groups_assembling) == (2, 1)
    assert report.restored_from == str(tmp_path / "buffer.snapshot.prev")
    reason = REASONS[how].format(half=size // 2, size=size)
    assert [(s.path, s.reason) for s in report.skipped] == [(str(newest), reason)]
    line = report.line()
    assert line is not None
    assert line.startswith(f"buffer: snapshot {newest} is corrupt ({reason}); restored the "
                           f"previous one {tmp_path}/buffer.snapshot.prev (2 groups ready, 1 "
                           "assembling, version 0, written at ")
    assert "; lost: what the buffer accepted in the " in line
    assert "(the corrupt one held 5 groups ready, 0 assembling, version 0" in line
    assert snapshot.load_snapshot(str(tmp_path)) is not None


def test_with_no_intact_snapshot_the_buffer_starts_empty_and_says_what_was_lost(tmp_path):
    snapshot.save_snapshot(str(tmp_path), _state(1))
    snapshot.save_snapshot(str(tmp_path), _state(4))
    _corrupt(tmp_path / "buffer.snapshot", "non_utf8")
    _corrupt(tmp_path / "buffer.snapshot.prev", "truncated")
    prev_size = msgspec.json.decode((tmp_path / "buffer.manifest.json").read_bytes())[
        "snapshots"][1]["size"]

    buf, report = _restored(tmp_path)
    assert (len(buf.store), buf.assembler.groups_assembling) == (0, 0)
    assert report.restored_from is None
    assert [s.reason for s in report.skipped] == [
        "checksum mismatch", f"truncated: {prev_size // 2:,} of {prev_size:,} bytes"]
    line = report.line()
    assert line is not None and line.startswith(
        f"buffer: snapshot {tmp_path}/buffer.snapshot is corrupt (checksum mismatch); "
        f"snapshot {tmp_path}/buffer.snapshot.prev is corrupt (truncated: ")
    assert ("; no intact snapshot: the buffer starts empty; lost: the corrupt one held 4 groups "
            "ready, 0 assembling, version 0, written at ") in line
    assert snapshot.load_snapshot(str(tmp_path)) is None


def test_without_a_manifest_an_undecodable_snapshot_is_skipped_not_raised(tmp_path):
    """Snapshots written before manifests existed: decoding is the only check. The drill's
    non-UTF-8 bytes raised UnicodeDecodeError out of the loader; now they are one skipped
    file and the previous snapshot is restored, unverified."""
    snapshot.save_snapshot(str(tmp_path), _state(3))
    snapshot.save_snapshot(str(tmp_path), _state(6))
    (tmp_path / "buffer.manifest.json").unlink()
    _corrupt(tmp_path / "buffer.snapshot", "non_utf8")

    buf, report = _restored(tmp_path)
    assert len(buf.store) == 3
    (skipped,) = report.skipped
    assert skipped.reason.startswith("does not decode: ")
    assert re.match(NON_UTF8, skipped.reason.removeprefix("does not decode: "))
    assert report.unverified == ("no usable buffer.manifest.json (written before snapshots had "
                                 "one)")
    line = report.line()
    assert line is not None and f"; restored the previous one {tmp_path}/buffer.snapshot.prev " \
        "(3 groups ready, 0 assembling, version 0, written at " in line
    assert line.endswith(", unverified: no usable buffer.manifest.json (written before "
                         "snapshots had one)")


def test_an_unreadable_manifest_leaves_decoding_as_the_check(tmp_path):
    snapshot.save_snapshot(str(tmp_path), _state(2))
    (tmp_path / "buffer.manifest.json").write_bytes(b"\x9a\x00 not json")
    buf, report = _restored(tmp_path)
    assert len(buf.store) == 2 and not report.skipped
    assert report.unverified == "no usable buffer.manifest.json (unreadable)"
    assert report.line() == (
        f"buffer: restored snapshot {tmp_path}/buffer.snapshot ({report.restored.holds()})"
        ", unverified: no usable buffer.manifest.json (unreadable)")


def test_a_snapshot_written_after_its_manifest_is_not_trusted(tmp_path):
    """A crash between the renames and the manifest: the new file is in no manifest entry
    (skipped), the old one, now .prev, still matches its entry under its old name."""
    snapshot.save_snapshot(str(tmp_path), _state(2))
    manifest = (tmp_path / "buffer.manifest.json").read_bytes()
    snapshot.save_snapshot(str(tmp_path), _state(3))
    (tmp_path / "buffer.manifest.json").write_bytes(manifest)  # as if the last write never ran

    new, old = ((tmp_path / name).stat().st_size for name in ("buffer.snapshot",
                                                               "buffer.snapshot.prev"))
    assert new > old  # 3 groups against 2

    buf, report = _restored(tmp_path)
    assert len(buf.store) == 2 and report.restored_from == str(tmp_path / "buffer.snapshot.prev")
    assert [s.reason for s in report.skipped] == [f"{new:,} bytes, the manifest records {old:,}"]


def test_a_schema_from_another_version_and_a_refused_restore_are_skipped(tmp_path):
    good = _state(2)
    snapshot.save_snapshot(str(tmp_path), good)
    other = msgspec.msgpack.encode(snapshot._Snapshot(snapshot.SNAPSHOT_SCHEMA + 1, _state(4)),
                                   enc_hook=m.enc_hook)
    (tmp_path / "buffer.snapshot.prev").write_bytes(
        (tmp_path / "buffer.snapshot").read_bytes())
    (tmp_path / "buffer.snapshot").write_bytes(other)
    (tmp_path / "buffer.manifest.json").unlink()  # decoding alone judges them here

    buf, report = _restored(tmp_path)
    assert len(buf.store) == 2
    assert [s.reason for s in report.skipped] == [
        f"snapshot schema {snapshot.SNAPSHOT_SCHEMA + 1}, this version reads "
        f"{snapshot.SNAPSHOT_SCHEMA}"]

    def refuse(state: BufferState) -> None:
        raise ValueError("inconsistent state")

    report = snapshot.restore_snapshot(str(tmp_path), refuse)
    assert report.restored_from is None
    assert [s.reason for s in report.skipped][1] == "restore failed: ValueError: inconsistent state"


def test_the_service_starts_from_the_previous_snapshot_and_reports_the_corrupt_one(tmp_path):
    """What a restarted buffer process does: the service comes up (no exception from its
    constructor), serves the previous snapshot's groups, and `snapshot_report` names the file."""
    snapshot.save_snapshot(str(tmp_path), _state(2))
    snapshot.save_snapshot(str(tmp_path), _state(5))
    _corrupt(tmp_path / "buffer.snapshot", "non_utf8")
    service = buffer_service(InProcTransport(), snapshot_dir=str(tmp_path), clock=FakeClock())
    try:
        assert service.restored and len(service.buffer.store) == 2
        report = service.snapshot_report
        assert report is not None
        assert [(s.path, s.reason) for s in report.skipped] == [
            (str(tmp_path / "buffer.snapshot"), "checksum mismatch")]
    finally:
        service.stop()  # its final snapshot: the restored state, now the newest, intact
    buf, report = _restored(tmp_path)
    assert len(buf.store) == 2 and report.line() is None


def test_the_service_starts_empty_when_no_snapshot_is_intact(tmp_path):
    (tmp_path / "buffer.snapshot").write_bytes(b"\x00 not a snapshot")
    service = buffer_service(InProcTransport(), snapshot_dir=str(tmp_path), clock=FakeClock())
    try:
        assert not service.restored and len(service.buffer.store) == 0
        assert service.snapshot_report is not None
        assert service.snapshot_report.line() == (
            f"buffer: snapshot {tmp_path}/buffer.snapshot is corrupt (does not decode: "
            "ValidationError: Expected `array`, got `int`); no intact snapshot: the buffer starts "
            "empty")
    finally:
        service.stop()

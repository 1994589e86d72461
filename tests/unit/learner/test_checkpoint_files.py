"""A checkpoint's manifest (learner/checkpoint_files.py): every way a `step-N` can fail its
check is named with its file, and only checkpoints that pass count as complete.

The checkpoints here are plain files laid out as a real one (`learner_state.json`, `dcp/`,
`model.safetensors`); the save path that writes real ones is in test_checkpoint.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from agent_r1_async.learner import checkpoint_files as files


def _checkpoint(root: Path, n: int, manifest: bool = True) -> Path:
    """A `step-n` with a 3 MiB shard (three hashing chunks), its state and, by default, its
    manifest (then learner_state.json says it has one, as `save_checkpoint` writes it)."""
    path = root / f"step-{n}"
    (path / "dcp").mkdir(parents=True)
    (path / "dcp" / "__0_0.distcp").write_bytes(bytes(range(256)) * (3 * 4096) + b"tail")
    (path / "model.safetensors").write_bytes(b"\x01" * 1000)
    state = {"version": n, "updates": n, **({"manifest": True} if manifest else {})}
    (path / "learner_state.json").write_text(json.dumps(state))
    if manifest:
        files.write_manifest(path)
    return path


def test_the_manifest_lists_each_file_with_its_size_and_sha256(tmp_path):
    path = _checkpoint(tmp_path, 1)
    doc = json.loads((path / "manifest.json").read_text())
    assert (doc["format"], doc["hash"]) == (1, "sha256")
    shard = (path / "dcp" / "__0_0.distcp").read_bytes()
    assert len(shard) == 3 * 2**20 + 4  # more than one 1 MiB chunk, and a partial one
    assert doc["files"]["dcp/__0_0.distcp"] == {"size": len(shard),
                                                "sha256": hashlib.sha256(shard).hexdigest()}
    assert sorted(doc["files"]) == ["dcp/__0_0.distcp", "learner_state.json",
                                    "model.safetensors"]
    assert not list(path.glob(".manifest*"))  # its temp file was renamed into place
    assert files.verify(path) == files.Verdict() and files.verify(path).usable


def _flip_last_byte(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))


CASES = {
    # name: (what is done to the checkpoint, the problem in full mode, in size-only mode)
    "half a shard": (lambda p: os.truncate(p / "dcp/__0_0.distcp", 3 * 2**19 + 2),
                     "{p}/dcp/__0_0.distcp: truncated: 1,572,866 of 3,145,732 bytes", "same"),
    "a longer file": (lambda p: (p / "model.safetensors").write_bytes(b"\x01" * 1001),
                      "{p}/model.safetensors: 1,001 bytes, the manifest records 1,000", "same"),
    "a missing file": (lambda p: (p / "model.safetensors").unlink(),
                       "{p}/model.safetensors: missing", "same"),
    "a flipped byte": (lambda p: _flip_last_byte(p / "dcp/__0_0.distcp"),
                       "{p}/dcp/__0_0.distcp: checksum mismatch", ""),
    "garbage in learner_state.json": (
        lambda p: (p / "learner_state.json").write_bytes(
            b"\x9a" * (p / "learner_state.json").stat().st_size),
        "{p}/learner_state.json: checksum mismatch", ""),
    "garbage in the manifest": (lambda p: (p / "manifest.json").write_bytes(b"\x9a{"),
                                "{p}/manifest.json: unreadable (DecodeError)", "same"),
    "a manifest naming a file outside": (
        lambda p: (p / "manifest.json").write_text(json.dumps({
            "format": 1, "hash": "sha256", "files": {"../../x": {"size": 1, "sha256": "0"}}})),
        "{p}/manifest.json: names a file outside the checkpoint (../../x)", "same"),
    "no manifest": (lambda p: (p / "manifest.json").unlink(), "{p}/manifest.json: missing",
                    "same"),
    "no manifest, state garbage": (
        lambda p: ((p / "manifest.json").unlink(),
                   (p / "learner_state.json").write_bytes(b"\x9a\x00")),
        "{p}/learner_state.json: unreadable (JSONDecodeError), and no manifest.json", "same"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_corruption_is_named_with_its_file(tmp_path, case):
    damage, full, quick = CASES[case]
    path = _checkpoint(tmp_path, 4)
    damage(path)
    assert files.verify(path, full=True) == files.Verdict(full.format(p=path))
    expected_quick = full if quick == "same" else quick
    assert files.verify(path, full=False) == files.Verdict(expected_quick.format(p=path))


def test_a_checkpoint_written_before_manifests_is_usable_but_unverified(tmp_path):
    path = _checkpoint(tmp_path, 2, manifest=False)
    unverified = files.Verdict(unverified="no manifest.json: written before checkpoints had one")
    assert files.verify(path) == unverified and files.verify(path).usable
    (path / "dcp" / "__0_0.distcp").unlink()
    (path / "dcp").rmdir()
    assert files.verify(path) == files.Verdict(f"{path}/dcp: missing")
    empty = tmp_path / "step-9"
    empty.mkdir()
    assert files.verify(empty) == files.Verdict(
        f"{empty}/manifest.json: missing (and no learner_state.json: not a checkpoint)")


def test_complete_checkpoints_are_those_that_pass_the_size_check(tmp_path):
    for n in (1, 2, 3, 4):
        _checkpoint(tmp_path, n, manifest=n != 4)
    os.truncate(tmp_path / "step-2" / "model.safetensors", 10)  # a truncated one: not counted
    (tmp_path / ".tmp-step-5-x").mkdir()  # a write in progress: never a checkpoint
    (tmp_path / "step-6").mkdir()  # an empty one
    assert [p.name for p in files.step_dirs(tmp_path)] == ["step-1", "step-2", "step-3",
                                                          "step-4", "step-6"]
    assert [p.name for p in files.complete_checkpoints(tmp_path)] == ["step-1", "step-3",
                                                                     "step-4"]
    # keep=2 keeps the newest two that pass; the corrupt step-2 stays, uncounted.
    removed = files.prune_checkpoints(tmp_path, keep=2, latest=tmp_path / "step-4")
    assert [p.name for p in removed] == ["step-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step-5-x", "step-2", "step-3",
                                                         "step-4", "step-6"]

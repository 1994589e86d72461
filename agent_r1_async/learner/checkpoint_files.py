"""The checkpoint directory's housekeeping: manifests, a full disk said plainly, pruning,
and the update record the newest checkpoint keeps.

Manifest: each `step-N` holds `manifest.json`, written last, just before the directory is
renamed into place: every other file's relative path, size and SHA-256 (read in 1 MiB chunks,
several files at once; SHA-256 because x86 and ARM hash it in hardware, about 1 GB/s per core
here, twice blake2b's speed). `verify` checks a checkpoint against it: `full=False` only
looks at the sizes (`stat`, for `latest_checkpoint` and pruning), `full=True` reads every byte
(before a resume loads it). Each problem names the failing file: a file missing, cut short
(a half-written DCP shard or `model.safetensors`), a checksum mismatch (garbage written over
`learner_state.json`), `manifest.json` itself missing or unreadable. A checkpoint without
`manifest.json` whose `learner_state.json` does not say it has one was written before
manifests existed: it is accepted as *unverified* (said once on resume) when its
`learner_state.json` reads and its `dcp/` is there.

Disk full: a checkpoint write that fails for a full disk (agent_r1_async/disk.py `disk_full`)
raises `disk_full_error`'s `DiskFullError` instead, naming the directory, the bytes free and
the size of the previous checkpoint. Any other error passes through unchanged.

Pruning (`learner.keep_checkpoints`): keep the newest k *complete* checkpoints (a `step-N`
whose files have the sizes its manifest records, or an unverified one written before
manifests; `save_checkpoint` only ever renames a finished one into place), never the one
`latest` names, never anything else in the directory (`.tmp-*` of a write in progress, the
`latest` link). A checkpoint that fails the check is not counted, so the k kept are ones a
resume can fall back to; it is not removed either (it stays for inspection). A checkpoint is
first renamed to a dot-name, then removed, so a crash mid-removal leaves no half `step-N` for
a later resume to trip on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.disk import DiskFullError, dir_bytes

_STEP = re.compile(r"step-(\d+)")
MANIFEST = "manifest.json"
HAS_MANIFEST = "manifest"
"""The key in learner_state.json that says the checkpoint was written with a manifest."""
_CHUNK = 1 << 20
_HASH_THREADS = 4


def disk_full_error(exc: BaseException, what: str, directory: Path, free: int,
                    previous: Path | None) -> DiskFullError:
    """The error to raise instead of `exc`: where, how much is free, what to do."""
    size = f"; the previous checkpoint takes {dir_bytes(previous):,} bytes" if previous else ""
    return DiskFullError(
        f"disk full: {what} could not be written under {directory} ({free:,} bytes free on "
        f"that filesystem{size}; the write failed with {type(exc).__name__}: "
        f"{str(exc)[:120]}). Free some space, or keep fewer checkpoints "
        "(learner.keep_checkpoints).")


def step_number(path: Path) -> int | None:
    """N of a `step-N` directory name, else None."""
    match = _STEP.fullmatch(path.name)
    return int(match.group(1)) if match else None


def step_dirs(root: Path) -> list[Path]:
    """Every `step-N` directory under `root` (complete or not), oldest first."""
    found = [(n, p) for p in (root.iterdir() if root.is_dir() else ())
             if (n := step_number(p)) is not None and p.is_dir() and not p.is_symlink()]
    return [p for _, p in sorted(found)]


def complete_checkpoints(root: Path) -> list[Path]:
    """`step-N` directories that pass `verify(full=False)`, oldest first."""
    return [p for p in step_dirs(root) if verify(p, full=False).usable]


# ---- manifests ---------------------------------------------------------------------------


class _File(msgspec.Struct, frozen=True):
    size: int
    sha256: str


class Manifest(msgspec.Struct):
    format: int
    hash: str
    files: dict[str, _File]
    """Relative path (with `/`) -> size and checksum, for every file but the manifest."""


@dataclass(frozen=True)
class Verdict:
    """`verify`'s answer: `problem` says why a checkpoint cannot be used (naming the file),
    `unverified` why a usable one could not be checked; both "" for a verified one."""

    problem: str = ""
    unverified: str = ""

    @property
    def usable(self) -> bool:
        return not self.problem


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks into one buffer."""
    digest = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


def _hash_all(paths: list[Path]) -> list[str]:
    """Checksums of `paths`, several files at once (hashlib and reads release the GIL)."""
    if len(paths) < 2:
        return [file_sha256(p) for p in paths]
    with ThreadPoolExecutor(min(_HASH_THREADS, len(paths))) as pool:
        return list(pool.map(file_sha256, paths))


def _files(ckpt: Path) -> list[Path]:
    return sorted(p for p in ckpt.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.name != MANIFEST)


def write_manifest(ckpt: Path) -> Manifest:
    """Checksum every file under `ckpt` and write `ckpt`/manifest.json (temp file, fsync,
    rename): the last file of a checkpoint."""
    paths = _files(ckpt)
    sizes = [p.stat().st_size for p in paths]
    files = {p.relative_to(ckpt).as_posix(): _File(size, digest)
             for p, size, digest in zip(paths, sizes, _hash_all(paths), strict=True)}
    manifest = Manifest(1, "sha256", files)
    tmp = ckpt / f".{MANIFEST}.tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(manifest), indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt / MANIFEST)
    return manifest


def _size_problem(path: Path, expected: int) -> str:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{path}: missing"
    except OSError as e:
        return f"{path}: unreadable ({e.strerror or e})"
    if size < expected:
        return f"{path}: truncated: {size:,} of {expected:,} bytes"
    if size > expected:
        return f"{path}: {size:,} bytes, the manifest records {expected:,}"
    return ""


def _without_manifest(ckpt: Path) -> Verdict:
    """A checkpoint with no manifest.json: written before manifests (unverified, if it looks
    whole), or one whose manifest is gone (unusable)."""
    state = ckpt / "learner_state.json"
    if not state.is_file():
        return Verdict(f"{ckpt / MANIFEST}: missing (and no learner_state.json: not a "
                       "checkpoint)")
    try:
        written_with_manifest = bool(json.loads(state.read_bytes()).get(HAS_MANIFEST))
    except Exception as e:  # unreadable, not JSON, not an object
        return Verdict(f"{state}: unreadable ({type(e).__name__}), and no {MANIFEST}")
    if written_with_manifest:
        return Verdict(f"{ckpt / MANIFEST}: missing")
    if not (ckpt / "dcp").is_dir():
        return Verdict(f"{ckpt / 'dcp'}: missing")
    return Verdict(unverified=f"no {MANIFEST}: written before checkpoints had one")


def verify(ckpt: Path, full: bool = True) -> Verdict:
    """Check a checkpoint against its manifest (module docstring): sizes only, or every
    byte with `full`."""
    try:
        raw = (ckpt / MANIFEST).read_bytes()
    except FileNotFoundError:
        return _without_manifest(ckpt)
    except OSError as e:
        return Verdict(f"{ckpt / MANIFEST}: unreadable ({e.strerror or e})")
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except Exception as e:  # garbage in the manifest itself
        return Verdict(f"{ckpt / MANIFEST}: unreadable ({type(e).__name__})")
    names = sorted(manifest.files)
    outside = [n for n in names if Path(n).is_absolute() or ".." in Path(n).parts]
    if outside:
        return Verdict(f"{ckpt / MANIFEST}: names a file outside the checkpoint ({outside[0]})")
    for name in names:
        problem = _size_problem(ckpt / name, manifest.files[name].size)
        if problem:
            return Verdict(problem)
    if full:
        try:
            digests = _hash_all([ckpt / n for n in names])
        except OSError as e:
            return Verdict(f"{e.filename}: unreadable ({e.strerror or e})")
        for name, digest in zip(names, digests, strict=True):
            if digest != manifest.files[name].sha256:
                return Verdict(f"{ckpt / name}: checksum mismatch")
    return Verdict()


def prune_checkpoints(root: Path, keep: int, latest: Path | None) -> list[Path]:
    """Remove all but the newest `keep` complete checkpoints (0: keep all), never `latest`;
    returns what was removed."""
    if keep <= 0:
        return []
    done = complete_checkpoints(root)
    protect = latest.resolve() if latest is not None else None
    removed = []
    for path in done[:-keep]:
        if protect is not None and path.resolve() == protect:
            continue
        doomed = path.with_name(f".del-{path.name}")
        path.rename(doomed)  # gone from step-N at once; the slow removal cannot leave half
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(path)
    return removed


def checkpointed_update(root: Path) -> dict[str, Any] | None:
    """The update record the newest complete checkpoint under `root` keeps (`last_update` in
    its learner_state.json, learner/loop.py): {"metrics": the learner's metrics,
    "staleness_hist": {staleness: count}}, when it is the record of the checkpoint's own
    version; None without a checkpoint, or for one that keeps no such record."""
    found = complete_checkpoints(root)
    if not found:
        return None
    try:
        state = json.loads((found[-1] / "learner_state.json").read_text())
        last = state["last_update"]
        version = int(last["metrics"]["version"])
        hist = {int(k): int(v) for k, v in last.get("staleness_hist", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a checkpoint that keeps no update record
    if version != int(state.get("version", -1)):
        return None
    return {"metrics": last["metrics"], "staleness_hist": hist}

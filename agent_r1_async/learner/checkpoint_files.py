"""The checkpoint directory's housekeeping: manifests, a full disk said plainly, pruning.

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

Disk full: torch's writer reports a failed write as `RuntimeError: [enforce fail at
inline_container.cc:672] unexpected pos ...` (no errno), which never says why. `disk_full`
recognises a failed write as a full disk when the error chain carries ENOSPC / EDQUOT or
"No space left on device" (also as one rank's error inside DCP's `CheckpointException`), or
when it is torch's writer error and the filesystem has less than `_NEARLY_FULL` bytes free at
that moment; `DiskFullError` then names the directory and the bytes free. Any other error
passes through unchanged.

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

import errno
import hashlib
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import msgspec

_STEP = re.compile(r"step-(\d+)")
MANIFEST = "manifest.json"
HAS_MANIFEST = "manifest"
"""The key in learner_state.json that says the checkpoint was written with a manifest."""
_CHUNK = 1 << 20
_HASH_THREADS = 4
_NEARLY_FULL = 256 * 2**20  # a torch write that failed with less than this free: the disk
_TORCH_WRITE_ERRORS = ("inline_container", "unexpected pos", "file write failed", "basic_ios")


class DiskFullError(RuntimeError):
    """A checkpoint could not be written because its filesystem is full."""


def free_bytes(path: Path) -> int:
    """Bytes free to this process on `path`'s filesystem (its nearest existing parent's)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def disk_full(exc: BaseException, free: int) -> bool:
    """Did this write fail because the disk is full? (`free`: bytes free right after it.)"""
    seen: set[int] = set()
    e: BaseException | None = exc
    torch_write = False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e)
        if "No space left on device" in text:
            return True
        torch_write |= isinstance(e, RuntimeError) and any(s in text for s in _TORCH_WRITE_ERRORS)
        if any(disk_full(x, free) for x in _rank_errors(e)):
            return True
        e = e.__cause__ or e.__context__
    return torch_write and free < _NEARLY_FULL


def _rank_errors(e: BaseException) -> list[BaseException]:
    """The per-rank errors inside DCP's `CheckpointException` (its `failures`: rank ->
    (error, stack)); [] for any other error. Duck-typed: the launcher imports this module
    without torch."""
    failures = getattr(e, "failures", None)
    if not isinstance(failures, dict):
        return []
    return [f[0] for f in failures.values()
            if isinstance(f, tuple) and f and isinstance(f[0], BaseException)]


def disk_full_error(exc: BaseException, what: str, directory: Path, free: int,
                    previous: Path | None) -> DiskFullError:
    """The error to raise instead of `exc`: where, how much is free, what to do."""
    size = f"; the previous checkpoint takes {dir_bytes(previous):,} bytes" if previous else ""
    return DiskFullError(
        f"disk full: {what} could not be written under {directory} ({free:,} bytes free on "
        f"that filesystem{size}; the write failed with {type(exc).__name__}: "
        f"{str(exc)[:120]}). Free some space, or keep fewer checkpoints "
        "(learner.keep_checkpoints).")


def error_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception behind it, each once: its `__cause__` and `__context__`, and
    the `.cause` Ray's task errors keep of the exception raised in another process."""
    chain: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is c for c in chain):
            continue
        chain.append(e)
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return chain


def disk_full_message(exc: BaseException) -> str | None:
    """The message of a `DiskFullError` behind `exc` (also one raised in another process),
    or None."""
    return next((str(e) for e in error_chain(exc)
                 if isinstance(e, DiskFullError) and str(e).startswith("disk full")), None)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


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

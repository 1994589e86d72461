"""Checkpoints: `RUN_DIR/checkpoints/step-N/`, written atomically, with a `latest` symlink.

Two views of the same state, for two readers:
- a plain HF model directory (config.json, safetensors weights, tokenizer), gathered on rank
  0, so `model.init_from`, `eval --model` and warm start keep taking a checkpoint as they take
  any HF model (LoRA: the merged weights);
- `dcp/`: the trainer's exact state with torch.distributed.checkpoint (DCP): model (incl.
  value head and LoRA adapters) and AdamW state, each rank writing its own shards. DCP stores
  every tensor's global shape and each shard's offsets, so a checkpoint written by N ranks
  loads into M ranks (or one unsharded process): resume at a different world size;
- `rng/rank-R.pt`: each rank's RNG states (torch, CUDA, Python, numpy); a rank with no file
  of its own (resuming with more ranks) takes rank 0's;
- `learner_state.json`: version, update count, data cursor (samples drawn), wall time;
- `config.yaml`: the run config;
- `manifest.json`: every other file's path, size and SHA-256 (checkpoint_files.py), written
  last.

The HF copy costs one more copy of the weights on disk; the alternative, an `eval` that reads
DCP, would tie every HF reader (vLLM, transformers, warm start) to our trainer's layout.

Atomicity: rank 0 makes `checkpoints/.tmp-step-N-*`, every rank writes its part there, and
after a barrier rank 0 writes the manifest, renames the directory to `step-N` (a rename within
one directory is atomic) and re-points `latest` with a symlink swap (`os.replace` of a fresh
symlink). A crash leaves either the old or the new checkpoint, and `latest` only ever names a
complete one. With several machines the run directory must be on storage they share.

Resume verifies before it loads (`resume_intact`): it takes the checkpoint `latest` names,
then the older `step-N` newest first, and uses the first that matches its manifest byte for
byte *and* loads. A checkpoint that does not (a truncated DCP shard or `model.safetensors`,
garbage in `learner_state.json`, no manifest, a load that raises, e.g. DCP's
`CheckpointException`) is skipped, named with the failing file and why; `ResumeReport.line()`
says which one was used and which updates the skipped ones held (lost: the run redoes
them). With none usable, `NoIntactCheckpoint` names the run directory and each reason.
Checkpoints written before manifests existed load unverified, said in the same line. With
several ranks, rank 0 alone reads and checks and every rank gets its verdict; after each load
the ranks agree (an all-reduce) whether it failed anywhere and move on together (a load that
fails on one rank only, inside one of DCP's collectives, can still hold the others there). The full
check reads every byte (a save's manifest reads the files it just wrote, from the page cache;
a resume reads them from disk, and its load then from the cache); `latest_checkpoint` and
pruning only compare sizes (`stat`). docs/reliability.md ("State that verifies itself")
says what each costs.

A full disk is reported as such (`disk.DiskFullError`: the directory and the bytes
free), not as torch's writer error nor as DCP's `CheckpointException` (a BaseException) around
it; after a new checkpoint is in place, all but the newest `keep` complete ones (those that
pass the size check: a corrupt one is not counted) are removed (`learner.keep_checkpoints`,
never the one `latest` names).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch.distributed.checkpoint.api import CheckpointException

from agent_r1_async import config, disk, models
from agent_r1_async.learner import checkpoint_files as files
from agent_r1_async.learner import distributed as dist_util

LATEST = "latest"
_T = TypeVar("_T")
log = logging.getLogger(__name__)


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state(legacy=True)
    if not isinstance(np_state, tuple):  # legacy=True: a tuple while the generator is MT19937
        raise TypeError(f"numpy's global generator is not MT19937: {np_state.get('bit_generator')}")
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))


def save_checkpoint(run_dir: str, trainer: Any, learner_state: dict[str, Any],
                    keep: int = 0) -> str:
    """Write checkpoint `step-{learner_state['updates']}`; return its directory. A collective
    when sharded: every rank calls it. `keep` > 0: then remove all but the newest `keep`
    complete checkpoints. A full disk raises `DiskFullError`."""
    root = Path(run_dir) / "checkpoints"
    name = f"step-{int(learner_state['updates'])}"
    tmp_name = None
    if dist_util.rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        tmp_name = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root)
    tmp = Path(dist_util.broadcast(tmp_name, str))
    final = root / name
    try:
        try:
            _write(tmp, trainer, learner_state)
        except (Exception, CheckpointException) as e:  # DCP's is a BaseException
            free = disk.free_bytes(tmp)
            if disk.disk_full(e, free):
                raise files.disk_full_error(e, f"checkpoint {name}", root, free,
                                            _previous(root)) from e
            raise
        dist_util.barrier()  # every rank's shards are on disk
        if dist_util.rank() == 0:
            files.write_manifest(tmp)  # last: a step-N without a whole manifest is no checkpoint
            if final.exists():  # re-saving the same step (final save right after a periodic one)
                shutil.rmtree(final)
            os.rename(tmp, final)
            link = root / f".{LATEST}-{os.getpid()}"
            if link.is_symlink():
                link.unlink()
            os.symlink(name, link)
            os.replace(link, root / LATEST)
            files.prune_checkpoints(root, keep, latest=final)
    finally:
        if dist_util.rank() == 0 and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    dist_util.barrier()  # nobody returns a path that is not there yet
    return str(final)


def _previous(root: Path) -> Path | None:
    link = root / LATEST
    return link.resolve() if link.exists() else None


def _dcp_state(trainer: Any) -> dict[str, Any]:
    """The trainer's model and optimizer state dicts keyed by parameter name (FQN), as DCP
    reads and writes them: sharded DTensors under FSDP2, plain tensors without."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    return {"model": get_model_state_dict(trainer.net),
            "optim": get_optimizer_state_dict(trainer.net, trainer.optimizer)}


def _write(out: Path, trainer: Any, learner_state: dict[str, Any]) -> None:
    import torch.distributed.checkpoint as dcp

    weights = trainer.published_state_dict()  # merged for LoRA; {} on ranks > 0
    if dist_util.rank() == 0:
        trainer._causal_lm().save_pretrained(str(out), state_dict=weights, safe_serialization=True)
        # A model without a tokenizer (test models) still checkpoints.
        with contextlib.suppress(OSError, ValueError):
            models.load_tokenizer(trainer.model_path).save_pretrained(str(out))
        (out / "learner_state.json").write_text(json.dumps(
            {**learner_state, "saved_at": time.time(), files.HAS_MANIFEST: True}, indent=1))
        (out / "config.yaml").write_text(config.dump_config(trainer.cfg))
        (out / "rng").mkdir()
    del weights
    dcp.save(_dcp_state(trainer), checkpoint_id=str(out / "dcp"), no_dist=not dist_util.active())
    dist_util.barrier()  # rng/ exists
    torch.save(_rng_state(), out / "rng" / f"rank-{dist_util.rank()}.pt")


def resume_candidates(run_dir: str) -> list[Path]:
    """The checkpoints a resume may use, in the order it tries them: the one `latest` names,
    then the older `step-N` directories, newest first (without `latest`: every `step-N`)."""
    root = Path(run_dir).resolve() / "checkpoints"
    steps = files.step_dirs(root)
    link = root / LATEST
    if not link.exists():
        return steps[::-1]
    newest = link.resolve()
    top = files.step_number(newest)
    older = [p for p in steps if top is not None and (files.step_number(p) or 0) < top]
    return [newest, *older[::-1]]


def latest_checkpoint(run_dir: str) -> str | None:
    """The checkpoint a resume starts from as far as a cheap look tells: the first of
    `resume_candidates` whose files have their manifest's sizes (`verify(full=False)`); when
    none has, the first (resuming then says why none is usable); None without a checkpoint."""
    candidates = resume_candidates(run_dir)
    for path in candidates:
        if files.verify(path, full=False).usable:
            return str(path)
    return str(candidates[0]) if candidates else None


class NoIntactCheckpoint(RuntimeError):
    """No checkpoint of the run can be resumed; the message names the run directory and
    why each checkpoint was skipped, on one line."""

    full_line: ClassVar[bool] = True
    """The console keeps this message whole (run/output/lines.py `one_line`)."""


@dataclass
class ResumeReport:
    """Which checkpoint a resume loaded, and which newer ones it skipped and why."""

    run_dir: str
    checkpoint: str | None = None
    version: int = 0
    unverified: str = ""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(checkpoint directory, why it was skipped), newest first."""

    def lost_updates(self) -> str:
        """The updates the skipped checkpoints held beyond the one used, e.g. "5..6"."""
        newest = files.step_number(Path(self.skipped[0][0])) if self.skipped else None
        used = files.step_number(Path(self.checkpoint)) if self.checkpoint else 0
        if newest is None or used is None or newest <= used:
            return ""
        return f"{used + 1}..{newest}" if newest > used + 1 else str(newest)

    def line(self) -> str | None:
        """The console's line when a checkpoint was skipped or is unverified, else None."""
        if not self.skipped and not self.unverified:
            return None
        said = [f"checkpoint {path} is corrupt ({why})" for path, why in self.skipped]
        what = "the previous one, " if self.skipped else ""
        tail = f", unverified: {self.unverified}" if self.unverified else ""
        lost = self.lost_updates()
        if lost:
            lost = (f"; updates {lost} are lost and redone" if ".." in lost
                    else f"; update {lost} is lost and redone")
        return (f"learner: {'; '.join([*said, f'resumed from {what}{self.checkpoint}'])} "
                f"(version {self.version}){tail}{lost}")

    def failure(self) -> str:
        reasons = "; ".join(f"{Path(path).name}: {why}" for path, why in self.skipped)
        return f"no intact checkpoint to resume {self.run_dir} from: {reasons or 'none found'}"


def _error_line(e: BaseException) -> str:
    """`Type: first line` of a load error; for DCP's `CheckpointException` (whose text is a
    traceback per rank), the first rank's own error."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, (inner, *_) = next(iter(sorted(failures.items())))
        return f"{type(e).__name__} on rank {rank}: {_error_line(inner)}"
    try:
        text = str(e)
    except Exception:  # an error whose message does not even print
        text = ""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first[:200]}".rstrip(": ")


def _release_memory() -> None:
    """What a failed load left allocated goes back before the next try."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _checked(path: Path) -> files.Verdict:
    """Rank 0 verifies (one read of every byte, not one per rank); every rank gets its
    verdict."""
    verdict = files.verify(path, full=True) if dist_util.rank() == 0 else None
    problem, unverified = dist_util.broadcast(
        [verdict.problem, verdict.unverified] if verdict is not None else None, list[str])
    return files.Verdict(problem, unverified)


def _tried(load: Callable[[str], _T], path: Path) -> tuple[list[_T], str]:
    """([what `load(path)` returned], "") or ([], why it failed on some rank): the ranks
    agree, so that all of them go on to the next checkpoint together."""
    loaded: list[_T] = []
    why = ""
    try:
        loaded.append(load(str(path)))
    except (Exception, CheckpointException) as e:  # DCP's is a BaseException
        log.warning("checkpoint %s failed to load", path, exc_info=True)
        why = f"loading it failed: {_error_line(e)}"
    if dist_util.all_reduce([1.0 if why else 0.0], op="max")[0] > 0:
        loaded.clear()
        why = why or "loading it failed on another rank"
        _release_memory()
    return loaded, why


def _version(path: Path) -> int:
    """The version a checkpoint holds (its learner_state.json; 0 if it does not say)."""
    try:
        return int(json.loads((path / "learner_state.json").read_text()).get("version", 0))
    except Exception:  # the loader read it already; this is for the report only
        return 0


def resume_intact(run_dir: str, load: Callable[[str], _T]) -> tuple[_T, ResumeReport]:
    """`load` the newest checkpoint of `run_dir` that verifies against its manifest and loads
    (module docstring), and the report of what was skipped; a collective when sharded (every
    rank calls it). Raises `NoIntactCheckpoint` when none does."""
    report = ResumeReport(run_dir)
    for path in resume_candidates(run_dir):
        verdict = _checked(path)
        if not verdict.usable:
            report.skipped.append((str(path), verdict.problem))
            continue
        loaded, why = _tried(load, path)
        if why:
            report.skipped.append((str(path), why))
            continue
        report.checkpoint, report.unverified = str(path), verdict.unverified
        report.version = _version(path)
        if report.line():
            log.warning("%s", report.line())
        return loaded[0], report
    raise NoIntactCheckpoint(report.failure())


def checkpoint_model_path(ckpt_dir: str, cfg: config.RunConfig) -> str:
    """The weights a resumed trainer is built from (LoRA: the base model, adapters on top)."""
    return cfg.model.name_or_path if cfg.learner.lora.enabled else ckpt_dir


def load_trainer_state(ckpt_dir: str, trainer: Any) -> dict[str, Any]:
    """Restore model, optimizer (value head, adapters) and RNG into `trainer` from the DCP
    state, whatever world size wrote it; return the learner state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    path = Path(ckpt_dir)
    if not (path / "learner_state.json").is_file() or not (path / "dcp").is_dir():
        raise FileNotFoundError(f"{ckpt_dir} is not a learner checkpoint (no learner_state.json "
                                "and dcp/)")
    state = _dcp_state(trainer)
    dcp.load(state, checkpoint_id=str(path / "dcp"), no_dist=not dist_util.active())
    set_model_state_dict(trainer.net, state["model"])
    set_optimizer_state_dict(trainer.net, trainer.optimizer, state["optim"])
    rng = path / "rng" / f"rank-{dist_util.rank()}.pt"
    rng = rng if rng.exists() else path / "rng" / "rank-0.pt"  # a rank the writer did not have
    _set_rng_state(torch.load(rng, weights_only=True))
    return json.loads((path / "learner_state.json").read_text())

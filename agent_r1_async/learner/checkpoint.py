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
- `config.yaml`: the run config.

The HF copy costs one more copy of the weights on disk; the alternative, an `eval` that reads
DCP, would tie every HF reader (vLLM, transformers, warm start) to our trainer's layout.

Atomicity: rank 0 makes `checkpoints/.tmp-step-N-*`, every rank writes its part there, and
after a barrier rank 0 renames it to `step-N` (a rename within one directory is atomic) and
re-points `latest` with a symlink swap (`os.replace` of a fresh symlink). A crash leaves either
the old or the new checkpoint, and `latest` only ever names a complete one. With several
machines the run directory must be on storage they share.

A full disk is reported as such (`checkpoint_files.DiskFullError`: the directory and the bytes
free), not as torch's writer error; after a new checkpoint is in place, all but the newest
`keep` complete ones are removed (`learner.keep_checkpoints`, never the one `latest` names).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent_r1_async import config, models
from agent_r1_async.learner import checkpoint_files as files
from agent_r1_async.learner import distributed as dist_util

LATEST = "latest"


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
        except Exception as e:
            free = files.free_bytes(tmp)
            if files.disk_full(e, free):
                raise files.disk_full_error(e, f"checkpoint {name}", root, free,
                                            _previous(root)) from e
            raise
        dist_util.barrier()  # every rank's shards are on disk
        if dist_util.rank() == 0:
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
        (out / "learner_state.json").write_text(
            json.dumps({**learner_state, "saved_at": time.time()}, indent=1))
        (out / "config.yaml").write_text(config.dump_config(trainer.cfg))
        (out / "rng").mkdir()
    del weights
    dcp.save(_dcp_state(trainer), checkpoint_id=str(out / "dcp"), no_dist=not dist_util.active())
    dist_util.barrier()  # rng/ exists
    torch.save(_rng_state(), out / "rng" / f"rank-{dist_util.rank()}.pt")


def latest_checkpoint(run_dir: str) -> str | None:
    """`RUN_DIR/checkpoints/latest` resolved, or None if there is no checkpoint yet."""
    link = Path(run_dir) / "checkpoints" / LATEST
    return str(link.resolve()) if link.exists() else None


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

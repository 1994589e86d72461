"""Checkpoints: `RUN_DIR/checkpoints/step-N/`, written atomically, with a `latest` symlink.

A checkpoint directory is also a plain HF model directory (config.json, safetensors weights,
tokenizer), so `model.init_from` / `eval --model` can point at it (LoRA: the merged weights).
Next to the model it holds:
- `trainer_state.pt`: optimizer, value head, LoRA adapter weights, RNG states (torch, CUDA,
  Python, numpy) — loaded with `weights_only=True`;
- `learner_state.json`: version, update count, data cursor (samples drawn), wall time;
- `config.yaml`: the run config.

Atomicity: everything is written into `checkpoints/.tmp-step-N-*` and renamed to `step-N`
(a rename within one directory is atomic), then `latest` is re-pointed with a symlink swap
(`os.replace` of a fresh symlink). A crash leaves either the old or the new checkpoint.
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

LATEST = "latest"


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
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


def save_checkpoint(run_dir: str, trainer: Any, learner_state: dict[str, Any]) -> str:
    """Write checkpoint `step-{learner_state['updates']}`; return its directory."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{int(learner_state['updates'])}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    try:
        _write(tmp, trainer, learner_state)
        final = root / name
        if final.exists():  # re-saving the same step (e.g. final save right after a periodic one)
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    link = root / f".{LATEST}-{os.getpid()}"
    if link.is_symlink():
        link.unlink()
    os.symlink(name, link)
    os.replace(link, root / LATEST)
    return str(final)


def _write(out: Path, trainer: Any, learner_state: dict[str, Any]) -> None:
    lm = trainer._causal_lm()
    weights = trainer.published_state_dict()  # merged for LoRA
    lm.save_pretrained(str(out), state_dict=weights, safe_serialization=True)
    # A model without a tokenizer (test models) still checkpoints.
    with contextlib.suppress(OSError, ValueError):
        models.load_tokenizer(trainer.model_path).save_pretrained(str(out))
    state: dict[str, Any] = {
        "optimizer": trainer.optimizer.state_dict(),
        "rng": _rng_state(),
        "value_head": trainer.value_head.state_dict() if trainer.value_head is not None else None,
        "adapter": None,
    }
    if trainer.lora:
        from peft import get_peft_model_state_dict

        state["adapter"] = get_peft_model_state_dict(trainer.model)
    torch.save(state, out / "trainer_state.pt")
    (out / "learner_state.json").write_text(
        json.dumps({**learner_state, "saved_at": time.time()}, indent=1)
    )
    (out / "config.yaml").write_text(config.dump_config(trainer.cfg))


def latest_checkpoint(run_dir: str) -> str | None:
    """`RUN_DIR/checkpoints/latest` resolved, or None if there is no checkpoint yet."""
    link = Path(run_dir) / "checkpoints" / LATEST
    return str(link.resolve()) if link.exists() else None


def checkpoint_model_path(ckpt_dir: str, cfg: config.RunConfig) -> str:
    """The weights a resumed trainer is built from (LoRA: the base model, adapters on top)."""
    return cfg.model.name_or_path if cfg.learner.lora.enabled else ckpt_dir


def load_trainer_state(ckpt_dir: str, trainer: Any) -> dict[str, Any]:
    """Restore optimizer, value head, adapters and RNG into `trainer`; return learner state."""
    path = Path(ckpt_dir)
    if not (path / "learner_state.json").is_file():
        raise FileNotFoundError(f"{ckpt_dir} is not a learner checkpoint (no learner_state.json)")
    state = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
    if state["adapter"] is not None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(trainer.model, state["adapter"])
    if state["value_head"] is not None and trainer.value_head is not None:
        trainer.value_head.load_state_dict(state["value_head"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    return json.loads((path / "learner_state.json").read_text())

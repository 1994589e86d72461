"""`launch.warm_start`: the supervised stage of a launch, run once per setting and cached.

A launch with `launch.warm_start: true` and no `model.init_from` first trains on the env's
demonstrations exactly like `agent-r1-async sft` (the `sft` section; its eval flags are
ignored, the launch evaluates on its own), then starts RL from that checkpoint: the RL run's
version 0 is the warm-started policy.

The checkpoint is cached in CACHE/warm-start/KEY (CACHE = `models.cache_dir()`), where KEY
hashes every setting that changes the trained weights: the base model, the env and context
settings (they define the demonstrations' tokens), the `sft` training settings and the
learner's optimizer settings and seed. Three RL seeds from one warm start therefore train it
once; changing `learner.lr` (the RL rate) or `sft.eval_num_tasks` does not retrain it. The
cache entry is built in a temporary directory under a file lock and renamed when complete, so
a killed launch leaves nothing half-written and two launches never train it twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.config import RunConfig, dump_config
from agent_r1_async.run.output.metrics import MetricsLogger
from agent_r1_async.run.processes import child

_LEARNER_KEYS = ("weight_decay", "betas", "grad_clip", "micro_batch_tokens", "bf16", "seed", "lora")
_SFT_IGNORED = ("eval_before", "eval_after", "eval_num_tasks", "log_every")
_SFT_KEYED_WHEN_SET = {"demo_seed": -1, "demo_offset": 0, "max_wall_time_s": 0.0,
                       "resume_from": ""}
"""Settings in the key only when they differ from these defaults, so that a warm start cached
before they existed keeps its key."""
_CONTEXT_BUILDER_KEYS = {"summary_max_tokens": "compact", "summary_prompt": "compact",
                         "truncate_to": "truncate"}
"""Context settings in the key only under the builder they change, so that a warm start cached
before they existed keeps its key."""
_CONTEXT_KEYED_WHEN_SET = {"truncate_to": 0}
"""Of those, the ones in the key only when they differ from these defaults, likewise."""


def warm_start_key(cfg: RunConfig) -> str:
    """16 hex digits naming the warm-start checkpoint that `cfg` trains."""
    # Lazy: the launch driver imports this module, and envs (jsonschema) are the actors'.
    from agent_r1_async.actors.context import PROMPT_LAYOUT
    from agent_r1_async.precision import learner_bf16

    learner = msgspec.to_builtins(cfg.learner)
    learner["bf16"] = learner_bf16(cfg.learner, model=cfg.model.name_or_path)  # auto resolved
    sft = msgspec.to_builtins(cfg.sft)
    parts: dict[str, Any] = {
        "model": [cfg.model.name_or_path, cfg.model.dtype, cfg.model.max_model_len],
        "env": msgspec.to_builtins(cfg.env),
        "context": {k: v for k, v in msgspec.to_builtins(cfg.context).items()
                    if _CONTEXT_BUILDER_KEYS.get(k, cfg.context.builder) == cfg.context.builder
                    and not (k in _CONTEXT_KEYED_WHEN_SET and v == _CONTEXT_KEYED_WHEN_SET[k])},
        "sft": {k: v for k, v in sft.items() if k not in _SFT_IGNORED
                and not (k in _SFT_KEYED_WHEN_SET and v == _SFT_KEYED_WHEN_SET[k])},
        "learner": {k: learner[k] for k in _LEARNER_KEYS},
        "prompt_layout": PROMPT_LAYOUT,
    }
    if cfg.sft.demos_source == "jsonl":  # the file's content, not only its name
        parts["jsonl_sha256"] = hashlib.sha256(Path(cfg.sft.jsonl_path).read_bytes()).hexdigest()
    if cfg.env.name == "multihop_qa":  # its oracle demonstrations come from the data files
        from agent_r1_async.envs.multihop.loaders import SHIPPED_DIR, corpus_version

        parts["corpus_version"] = corpus_version(cfg.env.args.get("data_dir") or SHIPPED_DIR)
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class _StepProgress(MetricsLogger):
    """The stage's metrics logger; each logged step also reports the launch's progress bar,
    and its lines (one per step: loss, tokens/s) reach the launch console on any stdout."""

    def log(self, metrics: dict[str, Any], step: int, histograms: Any = None) -> None:
        super().log(metrics, step, histograms)
        if "sft/total_steps" in metrics:
            child.progress(step, metrics["sft/total_steps"])

    def console(self, line: str) -> None:
        child.say(f"[launch] warm start: {line.removeprefix('[sft] ')}")


def _entry(cfg: RunConfig) -> Path:
    """The cache directory of `cfg`'s warm start."""
    from agent_r1_async.models import cache_dir

    return cache_dir() / "warm-start" / warm_start_key(cfg)


def is_cached(cfg: RunConfig) -> bool:
    """Whether `cfg`'s warm start is trained and cached (nothing to train: no torch needed)."""
    return (_entry(cfg) / ".complete").exists()


def warm_start(cfg: RunConfig, console: Callable[[str], None]) -> str:
    """The warm-start checkpoint for `cfg` (trained now unless cached); returns its path."""
    from agent_r1_async.models import build_atomically

    target = _entry(cfg)
    if (target / ".complete").exists():
        console(f"[launch] warm start: cached {target}")
    else:
        console(f"[launch] warm start: training {target.name} (cached for later launches)")

    def build(tmp: Path) -> None:
        from agent_r1_async.sft.train import train_stage  # torch: imported only to train

        quiet = msgspec.structs.replace(
            cfg, logging=msgspec.structs.replace(cfg.logging, wandb_mode="disabled")
        )
        sft_logger = _StepProgress(quiet, tmp)  # metrics.jsonl of the stage, kept in the cache
        try:
            train_stage(quiet, tmp, sft_logger)
        finally:
            sft_logger.close()
        (tmp / "config.json").write_text(json.dumps(msgspec.to_builtins(cfg.sft), indent=1))

    path = str((build_atomically(target, build) / "checkpoints" / "latest").resolve())
    console(f"[launch] warm start: RL starts from {path}")
    return path


def _warm_start_child(cfg: RunConfig) -> str:
    return warm_start(cfg, child.say)


def prepare_start(cfg: RunConfig, run_dir: Path,
                  on_message: Callable[[tuple], None] | None = None) -> RunConfig:
    """`launch.warm_start`: train (or reuse) the supervised warm start and start RL from it.

    The run's config.yaml then names the checkpoint in `model.init_from`, so `--resume` and
    the W&B config say where version 0 came from.
    """
    if not cfg.launch.warm_start or cfg.model.init_from:
        return cfg
    if is_cached(cfg):  # nothing to train: found here, without a child process
        ckpt = warm_start(cfg, child.say if on_message is None
                          else lambda line: on_message(("say", line)))
    else:
        log = None if cfg.logging.verbose else str(run_dir / "logs" / "warm-start.log")
        ckpt = child.in_subprocess(_warm_start_child, cfg, log_path=log, on_message=on_message)
    cfg = msgspec.structs.replace(cfg, model=msgspec.structs.replace(cfg.model, init_from=ckpt))
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return cfg

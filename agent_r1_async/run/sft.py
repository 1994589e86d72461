"""The `sft` command: (held-out eval) → demonstrations → train → checkpoint → (held-out eval)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig
from agent_r1_async.precision import describe as describe_precision
from agent_r1_async.run.output.run_dir import make_run_dir
from agent_r1_async.sft.train import train_stage


def run_sft(cfg: RunConfig) -> int:
    """The `sft` command: (eval) → demos → train → checkpoint → (eval); returns an exit code."""
    from agent_r1_async.models import resolve_model
    from agent_r1_async.run.evaluate import evaluate_and_log, format_table
    from agent_r1_async.run.output.metrics import MetricsLogger

    t_start = time.perf_counter()
    run_dir = make_run_dir(cfg)
    logger = MetricsLogger(cfg, run_dir)
    start_path = resolve_model(cfg.model.start_from)
    rows: list[dict[str, Any]] = []
    n = cfg.sft.eval_num_tasks
    try:
        logger.console(f"[sft] run dir {run_dir}; model {start_path}")
        logger.console("[sft] " + describe_precision(cfg.engine, cfg.learner,
                                                     model=cfg.model.name_or_path))
        if cfg.sft.eval_before:
            rows.append(evaluate_and_log(cfg, start_path, "before", logger, 0, n, "[sft]"))
            logger.console(format_table(rows))
        ckpt = train_stage(cfg, run_dir, logger)
        if cfg.sft.eval_after:
            steps = int(Path(ckpt).name.removeprefix("step-"))
            rows.append(evaluate_and_log(cfg, ckpt, "after", logger, steps, n, "[sft]"))
        if rows:
            print(format_table(rows), flush=True)
        logger.console(
            f"[sft] done in {time.perf_counter() - t_start:.0f} s. Start RL from it with\n"
            f"  agent-r1-async launch --set model.init_from={run_dir}/checkpoints/latest"
        )
    finally:
        logger.close()
    return 0

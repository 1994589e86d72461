"""bench/bench_learner.py `--default-config`: configs/default.yaml's learner as it is against
the learner before the memory changes, in alternating pairs."""

from __future__ import annotations

import os
import statistics
from typing import Any

from bench.learner_common import DEFAULT_CONFIG
from bench.learner_step import run_config

DEFAULT_SHAPES = dict(context=320, action=40)
"""`--default-config` (with `--rows` 12, its default there): 12 rows × (320 + 40) tokens = 3 micro-batches of ≤2,048 tokens, as a
default launch's update (~28 steps of ~330 context + ~22 action tokens packed into ~16
episode sequences, ~4.5k tokens, 3 micro-batches; runs/*/metrics.jsonl)."""
BEFORE = ["learner.gradient_checkpointing=false", "learner.head_chunk_tokens=0",
          "learner.malloc_mmap_threshold_kb=0", "learner.allocator=glibc"]
"""`--default-config`'s "before": the learner as it was (no activation checkpointing, the
LM head and log-softmax of a micro-batch's action tokens in one piece, glibc's own mmap
threshold)."""
AS_IS: list[str] = []
"""`--default-config`'s "as is": configs/default.yaml unchanged."""


def run_default_config(args: Any, model_path: str) -> None:
    """configs/default.yaml's learner as it is vs BEFORE (the learner before the memory
    changes), each in its own process, one after the other, `--repeats` pairs in alternating
    order, both on one thread. (Before, a launch ran updates on Ray's 2 alternating threads:
    ~10.6 GB, learner/memory_savers.py; too much to run here beside other work, and one thread is
    its lower peak, so the comparison is conservative.)"""
    print(f"## Learner updates, configs/default.yaml (fp32, {args.device}, 1 torch thread): "
          f"{args.steps} timed updates after 1 warm-up of ~{args.rows} rows × (~{args.context} "
          f"+ {args.action}) tokens (shapes vary), micro-batches of ≤2048 tokens")
    print(f"{'config':58} {'tokens/s':>9} {'tok/CPU-s':>9} {'peak MB':>8} {'loaded MB':>9}")
    configs = [("as is: " + _describe(AS_IS) + ", malloc_trim", AS_IS, True),
               ("before: " + _describe(BEFORE), BEFORE, False)]
    ratios = []
    for rep in range(args.repeats):
        res = {}
        for label, ov, as_is in (configs if rep % 2 == 0 else configs[::-1]):
            r = res[label] = run_config("ours", False, args, model_path, ov, as_is)
            print(f"{label:58} {r['tok_s']:>9.1f} {r['tok_cpu_s']:>9.1f} {r['peak_mb']:>8.0f} "
                  f"{r['rss_loaded_mb']:>9.0f}", flush=True)
        after, before = (res[label] for label, _, _ in configs)
        ratios.append((after["tok_s"] / before["tok_s"], after["tok_cpu_s"] / before["tok_cpu_s"],
                       after["peak_mb"] / before["peak_mb"]))
        print(f"pair {rep + 1}: as is / before: tokens/s {ratios[-1][0]:.2f}×, tokens per CPU "
              f"second {ratios[-1][1]:.2f}×, peak RSS {ratios[-1][2]:.2f}× (load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", flush=True)
    med = [statistics.median(r[k] for r in ratios) for k in range(3)]
    print(f"median over {len(ratios)} pair(s): tokens/s {med[0]:.2f}×, tokens per CPU second "
          f"{med[1]:.2f}×, peak RSS {med[2]:.2f}×")


def _describe(overrides: list[str]) -> str:
    from agent_r1_async.config import load_config

    lc = load_config(DEFAULT_CONFIG, overrides).learner
    ckpt = f"ckpt {lc.checkpoint_recompute}" if lc.gradient_checkpointing else "no ckpt"
    mmap = f", mmap≥{lc.malloc_mmap_threshold_kb}KB" if lc.malloc_mmap_threshold_kb else ""
    return f"{ckpt}, {lc.allocator}{mmap}, head chunks {lc.head_chunk_tokens or 'off'}"

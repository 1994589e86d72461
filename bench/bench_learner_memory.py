"""Learner peak memory and speed of configs/default.yaml under overrides, one process each.

    .venv/bin/python -m bench.bench_learner_memory            # pointwise vs whole-layer recompute
    .venv/bin/python -m bench.bench_learner_memory --variants "" "learner.head_chunk_tokens=256"

Each variant (a space-separated list of `key=value` overrides on configs/default.yaml, "" for
the file as is) runs in a fresh process started as a launch starts its learner (jemalloc
preloaded when `learner.allocator` says so; 1 torch thread): `PolicyTrainer.optimize` on 4
default-launch-shaped batches (12-16 steps of 320-340 context + 40-55 action tokens, seeds
0-3), each followed by a publish in the engines' dtype and the per-update purge, as
`Learner.update` does. Peak = the process's `ru_maxrss`; forward+backward seconds per update
(the trainer's own clock). A launch's learner adds ~0.3 GB of Ray worker and sockets on top.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHAPES = [(12, 320, 40), (14, 330, 55), (16, 340, 50), (14, 330, 55)]


def child(overrides: list[str]) -> None:
    import resource

    import torch

    from agent_r1_async import models
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import memory_savers
    from agent_r1_async.learner.batching import make_micro_batches
    from agent_r1_async.learner.trainer import PolicyTrainer
    from bench.learner_common import MODEL, synthetic_rows

    torch.set_num_threads(1)
    cfg = load_config(str(ROOT / "configs" / "default.yaml"), ["learner.device=cpu", *overrides])
    tr = PolicyTrainer(cfg, models.resolve_model(MODEL))
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    seconds = []
    for i, (n, ctx, act) in enumerate(SHAPES):
        rows = synthetic_rows(n, ctx, act, tr._causal_lm().config.vocab_size, seed=i)
        m = tr.optimize(make_micro_batches(rows, cfg.learner.micro_batch_tokens, tr.pad_id), 0)
        tr.published_state_dict(tr.publish_dtype)
        memory_savers.release_free_memory()
        seconds.append(m["time_forward_s"] + m["time_backward_s"])
    print(json.dumps({"loaded_gb": loaded, "seconds": seconds,
                      "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))


def run(overrides: list[str]) -> dict[str, object]:
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import memory_savers

    lc = load_config(str(ROOT / "configs" / "default.yaml"), overrides).learner
    env = {**os.environ, **memory_savers.learner_process_env(lc.allocator)}
    out = subprocess.run([sys.executable, "-m", "bench.bench_learner_memory", "--child",
                          *overrides], env=env,
                         capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["learner.checkpoint_recompute=pointwise",
                                                       "learner.checkpoint_recompute=all"])
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return
    from bench.stats import fmt_spread

    print(f"## Learner memory: configs/default.yaml, 1 thread, {len(SHAPES)} updates; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for v in args.variants:
        r = run(v.split())
        print(f"{v or '(as is)':50} peak {r['peak_gb']:.2f} GB (loaded {r['loaded_gb']:.2f}), "
              f"forward+backward {fmt_spread(r['seconds'], 1, ' s')}", flush=True)


if __name__ == "__main__":
    main()

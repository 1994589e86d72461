"""bench/bench_learner.py's CPU default: the whole update as the config runs it against a
plain HF step, alternating in one spawned process on one model."""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

from bench.children import next_message
from bench.learner_common import bench_config, plain_step, rss_mb, synthetic_rows
from bench.stats import fmt_spread


def _run_interleaved(bf16: bool, args: Any, model_path: str, q: Any,
                     overrides: list[str] | None = None) -> None:
    """The whole update as the config runs it against a plain HF step, alternating in ONE
    process on one model (load drifts hit both sides; the order flips every step).

    update = micro-batching the rows + the proximal pass where the config runs one
    (`needs_proximal_pass`: PPO epochs > 1, a value head or KL; GRPO with one epoch takes the
    proximal log-probs from the training forward) + `optimize` × ppo_epochs, as
    `Learner.update` does (sampling and publishing aside). The proximal pass is also timed
    alone on its own micro-batches, for configs that run it. Puts per-step seconds on `q`."""
    import torch

    from agent_r1_async.learner.batching import make_micro_batches
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.manual_seed(0)
    cfg = bench_config(bf16, args, overrides)
    trainer = PolicyTrainer(cfg, model_path)
    configured = trainer.needs_proximal_pass(cfg.learner.ppo_epochs)
    vocab = trainer._causal_lm().config.vocab_size
    rows = synthetic_rows(args.rows, args.context, args.action, vocab)
    mbt = cfg.learner.micro_batch_tokens

    def update() -> None:
        mbs = make_micro_batches(rows, mbt, trainer.pad_id)
        if configured:
            trainer.proximal_pass(mbs)
        for _ in range(cfg.learner.ppo_epochs):
            trainer.optimize(mbs)

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    plain_mbs = make_micro_batches(rows, mbt, trainer.pad_id)
    rss_loaded = rss_mb()
    res: dict[str, list[float]] = {"plain": [], "update": [], "proximal": []}
    for i in range(args.steps + 1):
        pair = [("plain", lambda: plain_step(trainer, plain_mbs, bf16)), ("update", update)]
        for name, fn in pair if i % 2 == 0 else pair[::-1]:
            t = timed(fn)
            if i > 0:  # the first round is a warm-up
                res[name].append(t)
        t = timed(lambda: trainer.proximal_pass(make_micro_batches(rows, mbt, trainer.pad_id)))
        if i > 0:
            res["proximal"].append(t)
    q.put({**res, "tokens": args.rows * (args.context + args.action), "configured": configured,
           "epochs": cfg.learner.ppo_epochs, "rss_loaded_mb": rss_loaded, "peak_mb": rss_mb()})


def run_interleaved(args: Any, model_path: str, bf16: bool,
                    overrides: list[str] | None = None) -> None:
    """Print the interleaved comparison: medians, ranges and per-step ratios."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_run_interleaved, args=(bf16, args, model_path, q, overrides))
    proc.start()
    try:
        r = next_message(q, proc, 3600, "the learner process")
    finally:
        proc.join(60)
    tokens = r["tokens"]
    prec = "bf16 autocast" if bf16 else "fp32"
    with_prox = [u + (0.0 if r["configured"] else p) for u, p in zip(r["update"], r["proximal"],
                                                                      strict=True)]
    lines = [(f"plain HF step, {prec}", r["plain"]),
             (f"whole update as configured ({'with' if r['configured'] else 'no'} proximal "
              f"pass, {r['epochs']} epoch)", r["update"]),
             ("proximal pass alone", r["proximal"])]
    if not r["configured"]:
        lines.append(("update + a proximal pass (as PPO/KL configs)", with_prox))
    print(f"{'':52} {'step s: median (min–max, n)':>30} {'tokens/s':>9} {'plain / this':>28}")
    for label, ts in lines:
        ratio = [p / t for p, t in zip(r["plain"], ts, strict=True)]
        print(f"{label:52} {fmt_spread(ts, 2):>30} {tokens / statistics.median(ts):>9.1f} "
              f"{fmt_spread(ratio, 2, '×'):>28}", flush=True)
    print(f"peak RSS {r['peak_mb']:.0f} MB (both sides in one process; {r['rss_loaded_mb']:.0f} "
          f"MB after loading)")

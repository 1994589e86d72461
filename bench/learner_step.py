"""One learner configuration in its own spawned process (its peak RSS is its own): a
synthetic GRPO step against the plain HF step (`--separate`, CUDA), or updates as a launch's
learner runs them (`--default-config`). Used by bench/bench_learner.py."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

from bench.children import next_message
from bench.learner_common import (
    DEFAULT_CONFIG,
    bench_config,
    flops_params,
    plain_step,
    rss_mb,
    synthetic_rows,
)


def run_one(mode: str, bf16: bool, args: Any, model_path: str, q: Any,
         overrides: list[str] | None = None, as_is: bool = True) -> None:
    """One configuration in this (fresh) process; puts a result dict on `q`."""
    import torch

    from agent_r1_async.learner.batching import make_micro_batches
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.manual_seed(0)
    cuda = args.device == "cuda"
    cfg = bench_config(bf16, args, overrides)
    if overrides is not None:  # as in a launch: the learner's torch threads = learner.num_cpus
        torch.set_num_threads(max(1, int(cfg.learner.num_cpus)))
    trainer = PolicyTrainer(cfg, model_path)
    if overrides is not None:
        q.put(run_like_launch(trainer, cfg, args, as_is))
        return
    lm = trainer._causal_lm()
    vocab = lm.config.vocab_size
    mbs = make_micro_batches(synthetic_rows(args.rows, args.context, args.action, vocab),
                             cfg.learner.micro_batch_tokens, trainer.pad_id)
    tokens = args.rows * (args.context + args.action)
    rss_loaded = rss_mb()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps + 1):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if mode == "ours":
            trainer.proximal_pass(mbs)
            t1 = time.perf_counter()
            trainer.optimize(mbs)
        else:
            t1 = t0
            plain_step(trainer, mbs, bf16)
        if cuda:
            torch.cuda.synchronize()
        if i > 0:  # the first step is a warm-up
            times.append((time.perf_counter() - t1, t1 - t0))
    step_s = statistics.median(t for t, _ in times)
    n_head = lm.get_output_embeddings().weight.numel()
    head_tokens = args.rows * args.action if mode == "ours" else tokens
    flops = 6 * ((flops_params(lm) - n_head) * tokens + n_head * head_tokens)
    out = {"tokens": tokens, "step_s": step_s, "tok_s": tokens / step_s, "flops": flops,
           "proximal_s": statistics.median(p for _, p in times),
           "rss_loaded_mb": rss_loaded, "peak_mb": rss_mb(), "n_params": flops_params(lm)}
    if cuda:
        out["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    q.put(out)


def run_like_launch(trainer: Any, cfg: Any, args: Any, as_is: bool) -> dict[str, float]:
    """`--default-config`: updates as a launch's learner runs them, on one thread (the
    learner's own, run/processes/learner_group.py) with shapes changing from update to update (rows and context
    lengths cycle); `as_is`: each update ends with `memory_savers.release_free_memory` as in
    `Learner.update` (before: it did not). tokens/s over all timed updates, by wall clock and
    by this process's CPU time (user + system: the fairer figure on a loaded machine, where
    wall time depends on what else runs)."""
    from concurrent.futures import ThreadPoolExecutor

    from agent_r1_async.learner.batching import make_micro_batches

    vocab = trainer._causal_lm().config.vocab_size
    pool = ThreadPoolExecutor(1)
    rss_loaded = rss_mb()
    tokens = wall = cpu = 0.0
    for i in range(args.steps + 1):
        rows = synthetic_rows(args.rows - i % 3, args.context + 16 * (i % 4), args.action,
                              vocab, seed=i)
        mbs = make_micro_batches(rows, cfg.learner.micro_batch_tokens, trainer.pad_id)
        w0, c0 = time.perf_counter(), time.process_time()
        pool.submit(_update, trainer, cfg, mbs, as_is).result()
        if i > 0:  # the first update is a warm-up
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
            tokens += sum(len(r.context_ids) + len(r.action_ids) for r in rows)
    pool.shutdown()
    return {"tokens": tokens, "step_s": wall / args.steps, "tok_s": tokens / wall,
            "tok_cpu_s": tokens / cpu, "rss_loaded_mb": rss_loaded, "peak_mb": rss_mb()}


def _update(trainer: Any, cfg: Any, mbs: list[Any], release: bool) -> None:
    """The trainer's part of `Learner.update` (the proximal pass only where it runs)."""
    from agent_r1_async.learner import memory_savers

    if trainer.needs_proximal_pass(cfg.learner.ppo_epochs):
        trainer.proximal_pass(mbs)
    trainer.optimize(mbs)
    if release:
        memory_savers.release_free_memory()


def run_config(mode: str, bf16: bool, args: Any, model_path: str,
               overrides: list[str] | None = None, as_is: bool = True) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=run_one, args=(mode, bf16, args, model_path, q, overrides, as_is))
    with _allocator_env(overrides):
        proc.start()
    try:
        return next_message(q, proc, 1800, "the learner process")
    finally:
        proc.join(60)


@contextlib.contextmanager
def _allocator_env(overrides: list[str] | None) -> Iterator[None]:
    """`--default-config`: the spawned process starts with `learner.allocator`'s environment
    (jemalloc preloaded), as `launch` starts a learner."""
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import memory_savers

    env = {} if overrides is None else memory_savers.learner_process_env(
        load_config(DEFAULT_CONFIG, overrides).learner.allocator)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

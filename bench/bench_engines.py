"""Engines: vLLM (CPU build) vs transformers, tokens/s on the same prompts and sampling.

    .venv/bin/python -m bench.bench_engines            # ~3 min on a quiet machine (9 at load 6)
    .venv/bin/python -m bench.bench_engines --quick    # 8 prompts × 16 tokens, 1 round

Both engines go through the project's `Engine` seam (`make_engine`, `engine.backend` = hf or
vllm), each in its own spawned process, one after the other. Prompts: the `arithmetic` env's
dev tasks, reset and rendered through SmolLM2's ChatML template by the real context builder
(system prompt with the calculator tool and a worked example + the problem: ~300 tokens).
Sampling: temperature 1, top-p 1, the same `max_new_tokens`, the same dtype (fp32 by
default), `--batch` concurrent `generate` calls (the engine batches them: continuous batching
in vLLM, one padded batch in the transformers engine). One warm-up round, then `--rounds`
timed rounds; tokens/s = generated tokens (eos included) / wall time of the round; median.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

from bench.children import next_message

MODEL = "smollm2-135m-instruct"


def arithmetic_prompts(n: int) -> list[list[int]]:
    """Context ids of the first step of `n` arithmetic dev tasks (chat template applied)."""
    from agent_r1_async.actors.context import History, make_context_builder
    from agent_r1_async.config import ContextConfig, EnvConfig
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.models import load_tokenizer

    tok = load_tokenizer(MODEL)
    spec = get_env_spec(EnvConfig(name="arithmetic"))
    builder = make_context_builder(ContextConfig(), tok)
    tasks = spec.tasks("dev")
    out = []
    for i in range(n):
        env = spec.make()
        obs = asyncio.run(env.reset(tasks[i % len(tasks)]))
        history = History(tok)
        history.add_messages(obs.messages)
        out.append(builder.build(history))
    return out


def _engine_main(backend: str, dtype: str, prompts: list[list[int]], max_new: int, rounds: int,
                 q: Any) -> None:
    os.dup2(2, 1)  # engine logs go to stderr: stdout keeps only the results table
    import torch

    from agent_r1_async.actors.engines import make_engine
    from agent_r1_async.config import EngineConfig, RunConfig
    from agent_r1_async.models import resolve_model

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = RunConfig(engine=EngineConfig(backend=backend, dtype=dtype, max_new_tokens=max_new,
                                        temperature=1.0, top_p=1.0,
                                        max_concurrent_requests=len(prompts)))
    t0 = time.perf_counter()
    engine = make_engine(cfg, resolve_model(MODEL), seed=0)
    start_s = time.perf_counter() - t0
    kind = type(engine).__name__

    async def one_round() -> tuple[int, float]:
        t = time.perf_counter()
        results = await asyncio.gather(*(engine.generate(p) for p in prompts))
        return sum(len(r.action_ids) for r in results), time.perf_counter() - t

    async def run() -> list[tuple[int, float]]:
        await one_round()  # warm-up (allocations, first-batch compilation, caches)
        timed = [await one_round() for _ in range(rounds)]
        await engine.close()
        return timed

    timed = asyncio.run(run())
    q.put((kind, start_s, timed))


def bench(backend: str, dtype: str, prompts: list[list[int]], max_new: int,
          rounds: int) -> tuple[str, float, list[tuple[int, float]]]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_engine_main, args=(backend, dtype, prompts, max_new, rounds, q))
    proc.start()
    try:
        return next_message(q, proc, 1200, "the engine process")
    finally:
        proc.join(120)
        if proc.is_alive():
            proc.terminate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    ap.add_argument("--quick", action="store_true", help="8 prompts × 16 tokens, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.max_new_tokens, args.rounds = 8, 16, 1
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    prompts = arithmetic_prompts(args.batch)
    mean_len = statistics.fmean(len(p) for p in prompts)
    print(f"## Engines: SmolLM2-135M-Instruct {args.dtype}, {args.batch} concurrent arithmetic "
          f"prompts ({mean_len:.0f} tokens avg), T=1, top-p 1, max_new_tokens "
          f"{args.max_new_tokens}; median of {args.rounds} rounds after 1 warm-up")
    print(f"{'engine':12} {'tokens/s':>9} {'tokens/round':>12} {'s/round':>8} {'start s':>8} "
          f"{'vs hf':>6}")
    base = None
    for backend in args.engines:
        kind, start_s, timed = bench(backend, args.dtype, prompts, args.max_new_tokens,
                                     args.rounds)
        rate = statistics.median(t / s for t, s in timed)
        base = base or (rate if backend == "hf" else None)
        ratio = f"{rate / base:>5.2f}×" if base else "   - "
        print(f"{kind:12} {rate:>9.1f} {statistics.median(t for t, _ in timed):>12.0f} "
              f"{statistics.median(s for _, s in timed):>8.2f} {start_s:>8.1f} {ratio}",
              flush=True)
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; vLLM keeps one "
          "core for itself)")


if __name__ == "__main__":
    main()

"""vLLM engine speed on this CPU: fp32 eager vs bf16 eager vs bf16 compiled, tokens/s and
start-up seconds measured in the same run, alone and beside a training learner.

    .venv/bin/python -m bench.bench_engine_speed                      # alone, ~6 min quiet
    .venv/bin/python -m bench.bench_engine_speed --beside-learner     # + a learner training
    .venv/bin/python -m bench.bench_engine_speed --variants fp32-eager bf16-eager --quick

Each variant runs the project's `VllmEngine` (through `make_engine`) in its own spawned
process, one after the other: start-up seconds (engine construction: model load, KV cache,
compilation for `compiled` variants), one warm-up round, then `--rounds` timed rounds of
`--batch` concurrent `generate` calls on the `arithmetic` env's dev prompts (~300 tokens each,
SmolLM2's chat template, as a launch renders them), T = 1, `--max-new-tokens` each; tokens/s
= generated tokens / round seconds, best round. The first variant is the baseline of the
ratio column (today's fp32 eager unless `--variants` says otherwise). A compiled variant
runs twice (`compiled` then `compiled (again)`): the second start shows whether vLLM's
compile cache reloads.

`--beside-learner`: a second spawned process trains `PolicyTrainer` (configs/default.yaml,
bf16 autocast where the CPU has it, 1 thread, synthetic default-launch batches) in a loop for
the whole measurement, as a launch's learner shares the 2 cores with the actor; its updates
per minute are printed too (over the whole run, and per variant over its timed rounds).

Per variant, the CPU cores its vLLM processes keep busy over the timed rounds (CPU seconds per
second): the engine core (scheduler) and the worker (the model). `bf16-eager-spin` against
`bf16-eager-park` is vLLM's own busy-wait against parking (`engine.ipc_busy_wait_s`):

    .venv/bin/python -m bench.bench_engine_speed --variants bf16-eager-spin bf16-eager-park bf16-eager-spin bf16-eager-park --rounds 6 --beside-learner
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from bench.bench_engines import MODEL, arithmetic_prompts
from bench.children import next_message

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "fp32-eager": {"dtype": "float32", "enforce_eager": True},
    "bf16-eager": {"dtype": "bfloat16", "enforce_eager": True},
    "bf16-compiled": {"dtype": "bfloat16", "enforce_eager": False},
    "bf16-eager-spin": {"dtype": "bfloat16", "enforce_eager": True, "ipc_busy_wait_s": 1.0},
    "bf16-eager-park": {"dtype": "bfloat16", "enforce_eager": True, "ipc_busy_wait_s": 0.0},
    "bf16-eager-park-all-cores": {"dtype": "bfloat16", "enforce_eager": True,
                                  "ipc_busy_wait_s": 0.0, "cpu_reserved_cores": 0},
}
"""bf16-eager-spin: vLLM's own 1 s busy-wait between its engine core and worker, explicitly; the
others run `engine.ipc_busy_wait_s` unset (the same 1 s) except `bf16-eager-park` (0;
actors/engines/vllm_wait.py). vLLM's CPU worker leaves one core to its engine core (on 2 cores
its OpenMP threads get one); `bf16-eager-park-all-cores` gives the worker every core
(`engine.cpu_reserved_cores: 0`, i.e. `VLLM_CPU_NUM_OF_RESERVED_CPU=0`) with the engine core
parked, as a stand-alone evaluation can run it."""


def _cpu_s(procs: list[Any]) -> list[float]:
    """User + system CPU seconds of each process (0 for one that is gone)."""
    import psutil

    out = []
    for p in procs:
        try:
            t = p.cpu_times()
            out.append(t.user + t.system)
        except psutil.NoSuchProcess:
            out.append(0.0)
    return out


def _engine_main(engine: dict[str, Any], prompts: list[list[int]], rounds: int, q: Any,
                 learner_updates: Any) -> None:
    os.dup2(2, 1)  # engine logs to stderr: stdout keeps the table
    import psutil

    from agent_r1_async.actors.engines import make_engine
    from agent_r1_async.config import EngineConfig, RunConfig
    from agent_r1_async.models import resolve_model

    cfg = RunConfig(engine=EngineConfig(backend="vllm", temperature=1.0, top_p=1.0,
                                        max_concurrent_requests=len(prompts), **engine))
    t0 = time.perf_counter()
    eng = make_engine(cfg, resolve_model(MODEL), seed=0)
    start_s = time.perf_counter() - t0

    async def one_round() -> tuple[int, float]:
        t = time.perf_counter()
        results = await asyncio.gather(*(eng.generate(p) for p in prompts))
        return sum(len(r.action_ids) for r in results), time.perf_counter() - t

    procs = psutil.Process().children(recursive=True)  # vLLM's engine core and worker
    names = [p.name() for p in procs]

    async def run() -> tuple[list[tuple[int, float]], dict[str, float]]:
        await one_round()
        cpu0, learned0, t0 = _cpu_s(procs), learner_updates.value, time.perf_counter()
        timed = [await one_round() for _ in range(rounds)]
        span = time.perf_counter() - t0
        cores = {n: (b - a) / span for n, a, b in zip(names, cpu0, _cpu_s(procs), strict=True)}
        cores["learner updates/min"] = 60 * (learner_updates.value - learned0) / span
        await eng.close()
        return timed, cores

    q.put((start_s, *asyncio.run(run())))


def _learner_main(stop: Any, q: Any, done: Any) -> None:
    os.dup2(2, 1)
    import torch

    from agent_r1_async.config import load_config
    from agent_r1_async.learner.batching import make_micro_batches
    from agent_r1_async.learner.trainer import PolicyTrainer
    from agent_r1_async.models import resolve_model
    from bench.learner_common import synthetic_rows

    torch.set_num_threads(1)
    cfg = load_config(str(ROOT / "configs" / "default.yaml"), ["learner.device=cpu"])
    trainer = PolicyTrainer(cfg, resolve_model(MODEL))
    rows = synthetic_rows(12, 320, 40, trainer._causal_lm().config.vocab_size)
    updates, t0 = 0, time.perf_counter()
    while not stop.is_set():
        trainer.optimize(make_micro_batches(rows, cfg.learner.micro_batch_tokens, trainer.pad_id))
        updates += 1
        done.value = updates
    q.put((updates, time.perf_counter() - t0))


def run_variant(engine: dict[str, Any], prompts: list[list[int]], rounds: int,
                learner_updates: Any) -> tuple[float, float, dict[str, float]]:
    """(start-up seconds, best tokens/s, {vLLM process: cores busy; "learner updates/min"})
    of one variant in its own process, over its timed rounds."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_engine_main, args=(engine, prompts, rounds, q, learner_updates))
    proc.start()
    try:
        start_s, timed, cores = next_message(q, proc, 1800, "the engine process")
    finally:
        proc.join(120)
        if proc.is_alive():
            proc.terminate()
    return start_s, max(t / s for t, s in timed), cores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["fp32-eager", "bf16-eager", "bf16-compiled"], choices=list(VARIANTS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv-cache-gb", type=float, default=2.0)
    ap.add_argument("--beside-learner", action="store_true")
    ap.add_argument("--quick", action="store_true", help="8 prompts × 16 tokens, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.max_new_tokens, args.rounds = 8, 16, 1
    prompts = arithmetic_prompts(args.batch)
    runs: list[tuple[str, dict[str, Any]]] = []
    for v in args.variants:
        runs.append((v, VARIANTS[v]))
        if not VARIANTS[v]["enforce_eager"]:
            runs.append((f"{v} (again)", VARIANTS[v]))
    ctx = mp.get_context("spawn")
    stop, lq, done = ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
    learner = None
    if args.beside_learner:
        learner = ctx.Process(target=_learner_main, args=(stop, lq, done))
        learner.start()
        time.sleep(30)  # the learner loads and reaches its steady state first
    results = []
    try:
        for name, engine in runs:
            extra = {"max_new_tokens": args.max_new_tokens, "kv_cache_gb": args.kv_cache_gb}
            results.append((name, *run_variant({**engine, **extra}, prompts, args.rounds, done)))
            print(f"{name}: start {results[-1][1]:.1f} s, {results[-1][2]:.1f} tok/s, "
                  + ", ".join(f"{k} {v:.2f}" for k, v in results[-1][3].items()), flush=True)
    finally:
        if learner is not None:
            stop.set()
            updates, secs = next_message(lq, learner, 600, "the learner process")
            learner.join(60)
    beside = " beside a training learner (1 thread)" if args.beside_learner else " alone"
    print(f"\n## vLLM engine speed{beside}: SmolLM2-135M, {args.batch} concurrent arithmetic "
          f"prompts × {args.max_new_tokens} new tokens, T = 1, best of {args.rounds} rounds; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{'variant':24} {'tok/s':>8} {'start s':>8} {'vs ' + results[0][0]:>16} "
          f"{'engine core':>12} {'worker':>7}" + (" learner/min" if learner else ""))
    for name, start_s, rate, cores in results:
        core = sum(v for k, v in cores.items() if "EngineCore" in k)
        worker = sum(v for k, v in cores.items() if "Worker" in k)
        print(f"{name:24} {rate:8.1f} {start_s:8.1f} {rate / results[0][2]:15.2f}× "
              f"{core:12.2f} {worker:7.2f}"
              + (f" {cores['learner updates/min']:11.1f}" if learner else ""))
    print("engine core, worker: CPU cores busy (CPU seconds per second) over the timed rounds")
    if learner is not None:
        print(f"learner beside it: {updates} updates in {secs:.0f} s "
              f"({60 * updates / secs:.1f} per minute)")


if __name__ == "__main__":
    main()

"""Weight sync: learner publishes SmolLM2-135M weights -> the actor's engine serves them.

    .venv/bin/python bench/bench_weight_sync.py                  # hf and vllm, ~2-3 minutes
    .venv/bin/python bench/bench_weight_sync.py --engines hf     # ~40 s
    .venv/bin/python bench/bench_weight_sync.py --quick          # hf only, 2 publishes

The learner (this process) holds the real SmolLM2-135M-Instruct weights (fp32, 135M params,
~540 MB as published: tied lm_head dropped like `PolicyTrainer.published_state_dict`) and
calls `WeightPublisher.publish(version, state_dict)` (CPU snapshot + zero-copy PUB frames).
The actor (a spawned process, like an actor host) polls a `WeightReceiver` (SUB, decode into
owned tensors) and hands the state dict to its engine's `load_weights`; the latency is
`time.time()` after `load_weights` returns minus `header.published_at` (the same clocks the
actors report as `weight_sync_latency_s`). Each engine is started once (vLLM: bf16, eager),
then `--publishes` versions are timed one after another; a 1-token generate after each
checks the engine reports the new version.

Baseline: a plain in-memory copy of the same bytes in one process (`{k: v.clone()}`), the
floor for moving the weights once. The ratio printed is sync latency / clone time.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = "smollm2-135m-instruct"


def _actor_main(backend: str, model_path: str, endpoint: str, n: int, q: Any) -> None:
    """Start one engine, then for each version: receive, load, check it serves; report times."""
    os.dup2(2, 1)  # engine logs go to stderr: stdout keeps only the results table
    import torch

    from agent_r1_async.actors.engines import make_engine
    from agent_r1_async.config import EngineConfig, RunConfig
    from agent_r1_async.wire.weights import WeightReceiver
    from agent_r1_async.wire.zmq import ZmqTransport

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    dtype = "bfloat16" if backend == "vllm" else "float32"
    cfg = RunConfig(engine=EngineConfig(backend=backend, dtype=dtype, max_new_tokens=1))
    t0 = time.perf_counter()
    engine = make_engine(cfg, model_path)
    start_s = time.perf_counter() - t0
    transport = ZmqTransport()
    rx = WeightReceiver(transport, endpoint)

    async def serve() -> None:
        await engine.generate([1, 2, 3], max_new_tokens=1)  # the engine is serving v0
        q.put(("ready", start_s))
        for _ in range(n):
            got = None
            while got is None:
                got = rx.poll(timeout_ms=100)
            header, state = got
            t_recv = time.time()
            await engine.load_weights(header.version, state)
            t_serve = time.time()
            res = await engine.generate([1, 2, 3], max_new_tokens=1)
            if res.policy_version != header.version:
                raise RuntimeError(f"engine serves v{res.policy_version}, want v{header.version}")
            q.put(("synced", header.published_at, t_recv, t_serve))
        await engine.close()

    try:
        asyncio.run(serve())
    finally:
        rx.close()
        transport.close()


def published_weights() -> dict[str, Any]:
    """SmolLM2-135M-Instruct weights as the learner publishes them (fp32, tied head dropped)."""
    from agent_r1_async import models

    model = models.load_causal_lm(MODEL)
    out, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() not in seen:
            seen.add(v.data_ptr())
            out[k] = v.detach().contiguous()
    return out


def bench_clone(state: dict[str, Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        copy = {k: v.clone() for k, v in state.items()}
        times.append(time.perf_counter() - t0)
        del copy
    return statistics.median(times)


def bench_engine(backend: str, state: dict[str, Any], n: int) -> dict[str, float]:
    """Median publish→serving latency and its parts for one engine (started once)."""
    from agent_r1_async import models
    from agent_r1_async.wire.weights import WeightPublisher
    from agent_r1_async.wire.zmq import ZmqTransport

    transport = ZmqTransport()
    pub = WeightPublisher(transport)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_actor_main,
                       args=(backend, models.resolve_model(MODEL), pub.endpoint, n, q))
    proc.start()
    try:
        _, start_s = q.get(timeout=600)
        time.sleep(1.0)  # SUB joins late: let the subscription reach the publisher
        rows = []
        for v in range(1, n + 1):
            t0 = time.perf_counter()
            pub.publish(v, state)
            publish_s = time.perf_counter() - t0
            _, published_at, t_recv, t_serve = q.get(timeout=600)
            rows.append((t_serve - published_at, publish_s, t_recv - published_at,
                         t_serve - t_recv))
        proc.join(120)
    finally:
        if proc.is_alive():
            proc.terminate()
        pub.close()
        transport.close()
    med = statistics.median
    return {"start_s": start_s, "total": med(r[0] for r in rows), "publish": med(r[1] for r in rows),
            "received": med(r[2] for r in rows), "load": med(r[3] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    ap.add_argument("--publishes", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="hf only, 2 publishes")
    args = ap.parse_args()
    if args.quick:
        args.engines, args.publishes = ["hf"], 2
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    state = published_weights()
    nbytes = sum(v.numel() * v.element_size() for v in state.values())
    clone_s = bench_clone(state, 5)
    print(f"## Weight sync: SmolLM2-135M-Instruct, {len(state)} tensors, {nbytes / 1e6:.0f} MB "
          f"fp32, tcp loopback PUB/SUB to a separate actor process; median of {args.publishes}")
    print(f"{'':34} {'total s':>8} {'× clone':>8} {'publish s':>9} {'at actor s':>10} "
          f"{'load s':>7} {'engine start s':>14}")
    print(f"{'baseline: in-memory clone':34} {clone_s:>8.3f} {1.0:>8.1f}")
    for backend in args.engines:
        r = bench_engine(backend, state, args.publishes)
        label = f"{backend} engine: publish -> serving"
        print(f"{label:34} {r['total']:>8.3f} {r['total'] / clone_s:>8.1f} {r['publish']:>9.3f} "
              f"{r['received']:>10.3f} {r['load']:>7.3f} {r['start_s']:>14.1f}", flush=True)
    print("(at actor = published_at → decoded at the actor; load = engine.load_weights; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

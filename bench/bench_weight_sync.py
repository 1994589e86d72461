"""Weight sync: learner publishes SmolLM2-135M weights -> the actor's engine serves them.

    .venv/bin/python -m bench.bench_weight_sync                  # hf, then vllm zmq | vllm_gloo
    .venv/bin/python -m bench.bench_weight_sync --engines vllm   # the two vLLM backends only
    .venv/bin/python -m bench.bench_weight_sync --engines hf     # ~40 s
    .venv/bin/python -m bench.bench_weight_sync --quick          # hf only, 2 publishes

The vLLM rows compare the weight backends side by side on ONE engine in ONE actor process
(started once with `WeightTransferConfig(backend="agent_r1_gloo")`, so it can take both):
versions alternate zmq, vllm_gloo, zmq, ... (`--publishes` of each). vllm_gloo: the learner's
`NativeWeightSender.publish` (CPU snapshot + checksum) → our gloo trainer engine → the
actor's `NativeWeightReceiver` → vLLM's start_weight_update / update_weights /
finish_weight_update in the engine's pause (keep) → serving. It needs the package's
`vllm.general_plugins` entry point installed (`pip install -e .`).

The learner (this process) holds the real SmolLM2-135M-Instruct weights (fp32, 135M params,
~540 MB as published: tied lm_head dropped like `PolicyTrainer.published_state_dict`) and
calls `ZmqWeightSender.publish(version, state_dict)` (CPU snapshot + zero-copy PUB frames).
The actor (a spawned process, like an actor host) polls a `WeightSubscriber` (SUB, decode into
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
import time
from typing import Any

from bench.children import next_message

MODEL = "smollm2-135m-instruct"


def _actor_main(backend: str, model_path: str, endpoints: dict[str, str], n: int, q: Any) -> None:
    """Start one engine, then apply whatever each weight backend brings; report times."""
    os.dup2(2, 1)  # engine logs go to stderr: stdout keeps only the results table
    import torch

    from agent_r1_async.actors.engines import make_engine
    from agent_r1_async.config import WEIGHTS_BACKENDS, EngineConfig, RunConfig
    from agent_r1_async.weights.zmq import ZmqWeightReceiver
    from agent_r1_async.wire.zmq import ZmqTransport

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    dtype = "bfloat16" if backend == "vllm" else "float32"
    weights = WEIGHTS_BACKENDS["vllm_gloo" if "vllm_gloo" in endpoints else "zmq"]()
    cfg = RunConfig(engine=EngineConfig(backend=backend, dtype=dtype, max_new_tokens=1),
                    weights=weights)
    t0 = time.perf_counter()
    engine = make_engine(cfg, model_path)
    start_s = time.perf_counter() - t0
    transport = ZmqTransport()
    channels: dict[str, Any] = {"zmq": ZmqWeightReceiver(transport, endpoints["zmq"])}
    if "vllm_gloo" in endpoints:
        from agent_r1_async.weights.native_receiver import NativeWeightReceiver

        channels["vllm_gloo"] = NativeWeightReceiver(endpoints["vllm_gloo"], "bench-actor",
                                                    dtype=dtype)

    async def serve() -> None:
        await engine.generate([1, 2, 3], max_new_tokens=1)  # the engine is serving v0
        for ch in channels.values():  # the native channel joins its group here
            await ch.update(engine)
        q.put(("ready", start_s))
        done = 0
        while done < n * len(channels):
            for name, ch in channels.items():
                applied = await ch.update(engine)
                if applied is None:
                    continue
                t_serve = time.time()
                res = await engine.generate([1, 2, 3], max_new_tokens=1)
                if res.policy_version != applied.version:
                    raise RuntimeError(f"engine serves v{res.policy_version}, want v{applied.version}")
                q.put(("synced", name, applied.published_at, t_serve, engine.last_swap_s,
                       ch.failed, ch.rejected))
                done += 1
            await asyncio.sleep(0.005)
        await engine.close()

    try:
        asyncio.run(serve())
    finally:
        for ch in channels.values():
            ch.close()
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


def bench_engine(backend: str, state: dict[str, Any], n: int) -> dict[str, dict[str, float]]:
    """Median publish→serving latency per weight backend for one engine (started once)."""
    from agent_r1_async import models
    from agent_r1_async.weights.zmq import ZmqWeightSender
    from agent_r1_async.wire.zmq import ZmqTransport

    transport = ZmqTransport()
    senders: dict[str, Any] = {"zmq": ZmqWeightSender(transport)}
    if backend == "vllm":
        from agent_r1_async.weights.native_sender import NativeWeightSender

        senders["vllm_gloo"] = NativeWeightSender("vllm_gloo", "127.0.0.1", 0, 60.0)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_actor_main, args=(
        backend, models.resolve_model(MODEL), {k: s.endpoint for k, s in senders.items()}, n, q))
    proc.start()
    rows: dict[str, list[tuple[float, ...]]] = {k: [] for k in senders}
    fails = (0, 0)
    try:
        _, start_s = next_message(q, proc, 900, "the actor process")
        time.sleep(1.0)  # SUB joins late: let the subscription reach the PUB socket
        version = 0
        for _ in range(n):
            for name, sender in senders.items():  # side by side: alternate the backends
                version += 1
                t0 = time.perf_counter()
                sender.publish(version, state)
                publish_s = time.perf_counter() - t0
                _, got, published_at, t_serve, swap_s, *fails = next_message(q, proc, 600, "the actor process")
                assert got == name, (got, name)
                rows[name].append((t_serve - published_at, publish_s, swap_s))
        proc.join(120)
    finally:
        if proc.is_alive():
            proc.terminate()
        for sender in senders.values():
            sender.close()
        transport.close()
    med = statistics.median
    return {name: {"start_s": start_s, "total": med(r[0] for r in rs),
                   "publish": med(r[1] for r in rs), "swap": med(r[2] for r in rs),
                   "failed": fails[0], "rejected": fails[1]}
            for name, rs in rows.items()}


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
          f"fp32, tcp loopback to a separate actor process; median of {args.publishes}")
    print(f"{'':44} {'total s':>8} {'× clone':>8} {'publish s':>9} {'swap s':>7} "
          f"{'engine start s':>14}")
    print(f"{'baseline: in-memory clone':44} {clone_s:>8.3f} {1.0:>8.1f}")
    for backend in args.engines:
        for name, r in bench_engine(backend, state, args.publishes).items():
            label = f"{backend} engine, {name}: publish -> serving"
            print(f"{label:44} {r['total']:>8.3f} {r['total'] / clone_s:>8.1f} "
                  f"{r['publish']:>9.3f} {r['swap']:>7.3f} {r['start_s']:>14.1f}"
                  f"  (failed {r['failed']}, rejected {r['rejected']})", flush=True)
    print("(total = learner's publish() call → the engine serves the version; swap = the engine "
          "paused: zmq reload_weights from the file, vllm_gloo start/update/finish incl. the "
          f"transfer; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

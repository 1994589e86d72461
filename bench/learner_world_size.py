"""bench/bench_learner.py `--world-size`: the FSDP2-sharded learner step at each world size
(gloo on CPU, nccl on CUDA), with the bytes of state each rank holds."""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from typing import Any

from bench.children import next_message
from bench.learner_common import rss_mb, synthetic_rows


def _state_bytes(trainer: Any) -> int:
    """Bytes of parameters + gradients + optimizer state this rank holds (local shards)."""
    def local(t: Any) -> Any:
        return t.to_local() if hasattr(t, "to_local") else t

    n = 0
    for p in trainer.trainable_parameters():
        n += local(p).numel() * local(p).element_size()
        if p.grad is not None:
            n += local(p.grad).numel() * local(p.grad).element_size()
    for st in trainer.optimizer.state.values():
        for v in st.values():
            if hasattr(v, "numel") and v.numel() > 1:
                n += local(v).numel() * local(v).element_size()
    return n


def _run_rank(rank: int, ws: int, port: int, args: Any, model_path: str, q: Any) -> None:
    """One rank of a `--world-size` configuration; puts its result on `q`."""
    import torch

    from agent_r1_async.config import AlgorithmConfig, LearnerConfig, RunConfig
    from agent_r1_async.learner import batching, distributed
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.set_num_threads(max(1, args.threads))
    cuda = args.device == "cuda"
    if ws > 1:
        os.environ["LOCAL_RANK"] = str(rank)
        distributed.init_group(rank, ws, "127.0.0.1", port, "nccl" if cuda else "gloo")
    torch.manual_seed(0)
    cfg = RunConfig(algorithm=AlgorithmConfig(name="grpo"),
                    learner=LearnerConfig(lr=1e-6, bf16=cuda, device=args.device,
                                          micro_batch_tokens=args.micro_batch_tokens,
                                          world_size=ws))
    trainer = PolicyTrainer(cfg, model_path)
    rows = synthetic_rows(args.rows, args.context, args.action,
                          trainer._causal_lm().config.vocab_size)
    seqs = batching.training_sequences(rows)
    mine = distributed.balance([rows[s[-1]].length for s in seqs], ws)[rank]
    mbs = batching.sequences_to_micro_batches(rows, [seqs[i] for i in mine],
                                              args.micro_batch_tokens, trainer.pad_id)
    tokens = sum(rows[i].length for i in mine)
    times = []
    for i in range(args.steps + 1):
        distributed.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.optimize(mbs)
        if cuda:
            torch.cuda.synchronize()
        if i > 0:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else rss_mb()
    q.put({"rank": rank, "tokens": tokens, "step_s": step_s, "tok_s": tokens / step_s,
           "peak_mb": peak, "state_mb": _state_bytes(trainer) / 2**20})
    distributed.destroy_group()


def run_world_sizes(sizes: list[int], args: Any, model_path: str) -> None:
    from agent_r1_async.learner.distributed import free_port

    print(f"## FSDP2 learner step by world size: {args.rows} rows × ({args.context} + "
          f"{args.action}) tokens, micro-batches ≤{args.micro_batch_tokens}, {args.device}, "
          f"{args.threads} thread(s) per rank; median of {args.steps} steps after 1 warm-up")
    print(f"{'ws':>3} {'rank':>4} {'tokens':>7} {'step s':>7} {'tokens/s':>9} {'peak MB':>8} "
          f"{'param+grad+optim MB':>20} {'vs ws 1':>8}")
    base = None
    ctx = mp.get_context("spawn")
    for ws in sizes:
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=_run_rank, args=(r, ws, port, args, model_path, q))
                 for r in range(ws)]
        for p in procs:
            p.start()
        res = sorted((next_message(q, procs, 3600, "the learner ranks") for _ in procs), key=lambda r: r["rank"])
        for p in procs:
            p.join(120)
        base = base or res[0]["state_mb"]
        for r in res:
            print(f"{ws:>3} {r['rank']:>4} {r['tokens']:>7} {r['step_s']:>7.2f} "
                  f"{r['tok_s']:>9.1f} {r['peak_mb']:>8.0f} {r['state_mb']:>20.1f} "
                  f"{r['state_mb'] / base:>7.3f}×", flush=True)
        total = sum(r["tokens"] for r in res) / max(r["step_s"] for r in res)
        print(f"{ws:>3}  all {sum(r['tokens'] for r in res):>7} "
              f"{max(r['step_s'] for r in res):>7.2f} {total:>9.1f}", flush=True)

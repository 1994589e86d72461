"""Learner: tokens/s and peak memory of one optimizer step; MFU on a GPU.

    .venv/bin/python bench/bench_learner.py --rows 4    # CPU: whole update vs plain HF step,
                                                        # interleaved, 5 steps (~4 min quiet)
    .venv/bin/python bench/bench_learner.py --separate  # CPU, each side in its own process
    .venv/bin/python bench/bench_learner.py --quick     # 4 × 256 tokens, 1 timed step
    python bench/bench_learner.py --device cuda --model-size 0.5b   # GPU: MFU (random init)
    .venv/bin/python bench/bench_learner.py --world-size 1,2  # FSDP2 ranks (gloo on CPU)
    .venv/bin/python bench/bench_learner.py --default-config --rows 6 --steps 2 --repeats 2
        # configs/default.yaml's learner as is vs before the memory changes: peak RSS and
        # tokens/s (wall and per CPU second), in alternating pairs (see run_default_config)

CPU default: the whole update as the config runs it (micro-batching, the proximal pass where
the config runs one, `optimize`) and a plain HF step alternate in one spawned process on one
model, `--steps` rounds after a warm-up, the order flipping every round; each side's step
seconds as median (min–max) and the per-round ratio plain / ours, so machine load hits both
(`_run_interleaved`). `--separate` and CUDA: as below.

Each configuration runs in its own spawned process (so peak memory is that process's own):
- ours: `PolicyTrainer.proximal_pass` + `PolicyTrainer.optimize` (GRPO loss with decoupled
  proximal/behavior importance weights, action-only LM head, gradient accumulation over
  `micro_batch_tokens` micro-batches, AdamW step) on a synthetic batch of `--rows` steps of
  `--context` context + `--action` action tokens (random ids; the cost does not depend on
  them);
- baseline: a plain transformers step on the same tokens — `model(input_ids,
  labels=...)` over the same micro-batches, `loss.backward()`, AdamW step (the usual SFT
  loop: full-vocabulary logits at every position).
tokens/s = input tokens (context + action, without padding) / seconds of the optimizer step
(forward + backward + AdamW), median over `--steps` steps after one warm-up step. Peak memory
on CPU: `ru_maxrss` of the process (peak RSS; with the model-load RSS before the first step
beside it), on CUDA: `torch.cuda.max_memory_allocated`.

`--world-size 1,2`: for each N, N spawned ranks (torch.distributed, gloo on CPU / nccl on
CUDA, a free port on 127.0.0.1) each train their token-balanced share of the same batch with
the FSDP2-sharded `PolicyTrainer` (N = 1: the unsharded single-process path); per rank it
prints tokens/s (its own tokens / step seconds), peak memory and the bytes of parameters +
gradients + AdamW state that rank holds (its DTensor shards), and the ratio of the latter to
N = 1 (ideal: 1/N). Each rank still loads the full model before sharding it, so peak RSS on
CPU falls by less than the state does.

MFU (CUDA only): model FLOPs of the step / step seconds / peak FLOP/s, with the usual 6·N per
token: 6 · (N_body · tokens + N_head · head_tokens), N_body = parameters without the input
embedding and the head, N_head = the lm_head matrix (counted even when tied), head_tokens =
the positions the head is applied at (all tokens for the plain step; only the action tokens
for PolicyTrainer, which skips the head on context). Attention's sequence-length FLOPs are
left out (a lower bound). Peak: `--peak-tflops` (default by device name: H100/H200 989,
A100 312 dense bf16). The model is a random-init Qwen2 config (0.5B or 1.5B shapes), saved
once to a temp dir so `PolicyTrainer` loads it like any checkpoint. Not run on the CPU-only
development machines.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stats import fmt_spread, load_line

MODEL = "smollm2-135m-instruct"
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")
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

QWEN2_SHAPES = {  # Qwen2.5-0.5B / 1.5B architecture (random init)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, intermediate_size=8960, tie_word_embeddings=True),
}
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def random_qwen2_dir(size: str, root: str) -> str:
    """Save a random-init Qwen2 model of the given size (bf16 safetensors) under `root`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=4096, pad_token_id=0,
                      **QWEN2_SHAPES[size])
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    path = os.path.join(root, f"qwen2-{size}")
    model.save_pretrained(path)
    return path


def flops_params(model: Any) -> int:
    """N for 6·N·tokens: every parameter except the input embedding (a tied head counts once)."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    n = sum(p.numel() for p in model.parameters()) - emb.numel()
    return n + (head.numel() if head is emb else 0)


def synthetic_rows(n: int, ctx: int, act: int, vocab: int, seed: int = 0) -> list[Any]:
    from agent_r1_async.learner.batching import Row

    rng = random.Random(seed)
    return [
        Row(context_ids=[rng.randrange(3, vocab) for _ in range(ctx)],
            action_ids=[rng.randrange(3, vocab) for _ in range(act)],
            behavior_logprobs=[-rng.random() * 3 for _ in range(act)], token_versions=[0] * act,
            advantage=rng.gauss(0, 1), reward=0.0, sample_weight=1.0, group_index=i // 4,
            episode_index=i % 4, step_index=0, ids=(f"g{i // 4}", f"e{i}"))
        for i in range(n)
    ]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _bench_config(bf16: bool, args: Any, overrides: list[str] | None) -> Any:
    """The RunConfig of one configuration: `overrides` None = the synthetic GRPO learner;
    a list = configs/default.yaml with those `a.b=value` overrides (`--default-config`)."""
    from agent_r1_async.config import AlgorithmConfig, LearnerConfig, RunConfig, load_config

    if overrides is not None:
        return load_config(DEFAULT_CONFIG, [f"learner.device={args.device}", *overrides])
    return RunConfig(algorithm=AlgorithmConfig(name="grpo"),
                     learner=LearnerConfig(lr=1e-6, bf16=bf16, device=args.device,
                                           micro_batch_tokens=args.micro_batch_tokens,
                                           flash_attention=True))


def _run(mode: str, bf16: bool, args: Any, model_path: str, q: Any,
         overrides: list[str] | None = None, as_is: bool = True) -> None:
    """One configuration in this (fresh) process; puts a result dict on `q`."""
    import torch

    from agent_r1_async.learner.batching import make_micro_batches
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.manual_seed(0)
    cuda = args.device == "cuda"
    cfg = _bench_config(bf16, args, overrides)
    if overrides is not None:  # as in a launch: the learner's torch threads = learner.num_cpus
        torch.set_num_threads(max(1, int(cfg.learner.num_cpus)))
    trainer = PolicyTrainer(cfg, model_path)
    if overrides is not None:
        q.put(_run_like_launch(trainer, cfg, args, as_is))
        return
    lm = trainer._causal_lm()
    vocab = lm.config.vocab_size
    mbs = make_micro_batches(synthetic_rows(args.rows, args.context, args.action, vocab),
                             cfg.learner.micro_batch_tokens, trainer.pad_id)
    tokens = args.rows * (args.context + args.action)
    rss_loaded = _rss_mb()
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
           "rss_loaded_mb": rss_loaded, "peak_mb": _rss_mb(), "n_params": flops_params(lm)}
    if cuda:
        out["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    q.put(out)


def _run_like_launch(trainer: Any, cfg: Any, args: Any, as_is: bool) -> dict[str, float]:
    """`--default-config`: updates as a launch's learner runs them, on one thread (the
    learner's own, run/hosts.py) with shapes changing from update to update (rows and context
    lengths cycle); `as_is`: each update ends with `memory.release_free_memory` as in
    `Learner.update` (before: it did not). tokens/s over all timed updates, by wall clock and
    by this process's CPU time (user + system: the fairer figure on a loaded machine, where
    wall time depends on what else runs)."""
    from concurrent.futures import ThreadPoolExecutor

    from agent_r1_async.learner.batching import make_micro_batches

    vocab = trainer._causal_lm().config.vocab_size
    pool = ThreadPoolExecutor(1)
    rss_loaded = _rss_mb()
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
            "tok_cpu_s": tokens / cpu, "rss_loaded_mb": rss_loaded, "peak_mb": _rss_mb()}


def _update(trainer: Any, cfg: Any, mbs: list[Any], release: bool) -> None:
    """The trainer's part of `Learner.update` (the proximal pass only where it runs)."""
    from agent_r1_async.learner import memory

    if trainer.needs_proximal_pass(cfg.learner.ppo_epochs):
        trainer.proximal_pass(mbs)
    trainer.optimize(mbs)
    if release:
        memory.release_free_memory()


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
    cfg = _bench_config(bf16, args, overrides)
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
    rss_loaded = _rss_mb()
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
           "epochs": cfg.learner.ppo_epochs, "rss_loaded_mb": rss_loaded, "peak_mb": _rss_mb()})


def run_interleaved(args: Any, model_path: str, bf16: bool,
                    overrides: list[str] | None = None) -> None:
    """Print the interleaved comparison: medians, ranges and per-step ratios."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_run_interleaved, args=(bf16, args, model_path, q, overrides))
    proc.start()
    try:
        r = q.get(timeout=3600)
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
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _rss_mb()
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
        res = sorted((q.get(timeout=3600) for _ in procs), key=lambda r: r["rank"])
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


def run_default_config(args: Any, model_path: str) -> None:
    """configs/default.yaml's learner as it is vs BEFORE (the learner before the memory
    changes), each in its own process, one after the other, `--repeats` pairs in alternating
    order, both on one thread. (Before, a launch ran updates on Ray's 2 alternating threads:
    ~10.6 GB, learner/memory.py; too much to run here beside other work, and one thread is
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


def plain_step(trainer: Any, mbs: list[Any], bf16: bool) -> None:
    """The baseline: HF causal-LM loss on the action tokens, full logits, AdamW."""
    import torch

    model, dev = trainer._causal_lm(), trainer.device
    trainer.optimizer.zero_grad(set_to_none=True)
    for mb in mbs:
        labels = mb.input_ids.masked_fill(~mb.action_mask, -100).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=mb.input_ids.to(dev),
                         attention_mask=mb.attention_mask.to(dev), labels=labels).loss
        (loss / len(mbs)).backward()
    torch.nn.utils.clip_grad_norm_(trainer.trainable_parameters(), 1.0)
    trainer.optimizer.step()


def run_config(mode: str, bf16: bool, args: Any, model_path: str,
               overrides: list[str] | None = None, as_is: bool = True) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_run, args=(mode, bf16, args, model_path, q, overrides, as_is))
    with _allocator_env(overrides):
        proc.start()
    try:
        return q.get(timeout=1800)
    finally:
        proc.join(60)


@contextlib.contextmanager
def _allocator_env(overrides: list[str] | None) -> Iterator[None]:
    """`--default-config`: the spawned process starts with `learner.allocator`'s environment
    (jemalloc preloaded), as `launch` starts a learner."""
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import memory

    env = {} if overrides is None else memory.allocator_env(
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


def peak_tflops(args: Any) -> float:
    import torch

    if args.peak_tflops:
        return args.peak_tflops
    name = torch.cuda.get_device_name()
    for key, tf in PEAK_TFLOPS.items():
        if key in name:
            return tf
    raise SystemExit(f"unknown GPU {name!r}: pass --peak-tflops (dense bf16 TFLOP/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model-size", default="135m", choices=["135m", "0.5b", "1.5b"])
    ap.add_argument("--rows", type=int, default=None, help="default 8 (--default-config: 12)")
    ap.add_argument("--context", type=int, default=192)
    ap.add_argument("--action", type=int, default=64)
    ap.add_argument("--micro-batch-tokens", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5, help="timed steps after 1 warm-up")
    ap.add_argument("--separate", action="store_true",
                    help="CPU: each side in its own process (own peak memory), not interleaved")
    ap.add_argument("--bf16", action="store_true", help="CPU interleaved: bf16 autocast too")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--quick", action="store_true", help="4 rows, 1 timed step, fp32 only")
    ap.add_argument("--world-size", default="", help="comma-separated learner world sizes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--repeats", type=int, default=1, help="--default-config: A/B pairs")
    ap.add_argument("--default-config", action="store_true",
                    help="configs/default.yaml's learner (fp32, micro_batch_tokens 2048) at a "
                         "default launch's batch shapes, before vs after the memory changes")
    args = ap.parse_args()
    if args.default_config:
        for k, v in DEFAULT_SHAPES.items():
            setattr(args, k, v)
    args.rows = args.rows or (12 if args.default_config else 8)
    if args.quick:
        args.rows, args.steps = 4, 1
    cuda = args.device == "cuda"
    if cuda:
        import torch

        from agent_r1_async.models import attention_implementation

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device (torch.cuda.is_available() is False)")
        print("attention: {} ({})".format(*attention_implementation("cuda")))
    if cuda and args.model_size == "135m":
        args.model_size = "0.5b"
    if cuda:  # realistic GPU micro-batches: 16 rows × 1024 tokens, 8k-token micro-batches
        args.rows, args.context, args.action = max(args.rows, 16), 896, 128
        args.micro_batch_tokens = max(args.micro_batch_tokens, 8192)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model_size == "135m":
            from agent_r1_async.models import resolve_model

            model_path = resolve_model(MODEL)
        else:
            model_path = random_qwen2_dir(args.model_size, tmp)
        if args.default_config:
            run_default_config(args, model_path)
            return
        if args.world_size:
            run_world_sizes([int(x) for x in args.world_size.split(",")], args, model_path)
            print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            return
        if not cuda and not args.separate:
            print(f"## Learner update vs plain HF step, interleaved in one process: "
                  f"{args.model_size} on cpu, {args.rows} rows × ({args.context} context + "
                  f"{args.action} action) tokens, micro-batches of ≤{args.micro_batch_tokens} "
                  f"tokens; {args.steps} steps after 1 warm-up; {load_line()} at the start")
            for bf16 in [False] if args.quick or not args.bf16 else [False, True]:
                run_interleaved(args, model_path, bf16)
            print(f"({load_line()} at the end)")
            return
        precisions = [True] if cuda else ([False] if args.quick else [False, True])
        print(f"## Learner step: {args.model_size} on {args.device}, {args.rows} rows × "
              f"({args.context} context + {args.action} action) tokens, micro-batches of "
              f"≤{args.micro_batch_tokens} tokens; median of {args.steps} steps after 1 warm-up")
        print(f"{'config':28} {'tokens/s':>9} {'step s':>7} {'proximal s':>10} {'peak MB':>8} "
              f"{'loaded MB':>9} {'vs plain':>8}" + (f" {'MFU':>6}" if cuda else ""))
        for bf16 in precisions:
            plain = run_config("plain", bf16, args, model_path)
            ours = run_config("ours", bf16, args, model_path)
            prec = "bf16 autocast" if bf16 else "fp32"
            for label, r in ((f"plain HF step, {prec}", plain), (f"PolicyTrainer, {prec}", ours)):
                ratio = r["tok_s"] / plain["tok_s"]
                line = (f"{label:28} {r['tok_s']:>9.1f} {r['step_s']:>7.2f} "
                        f"{r['proximal_s']:>10.2f} {r['peak_mb']:>8.0f} "
                        f"{r['rss_loaded_mb']:>9.0f} {ratio:>7.2f}×")
                if cuda:
                    mfu = r["flops"] / r["step_s"] / (peak_tflops(args) * 1e12)
                    line += f" {mfu:>6.1%}"
                print(line, flush=True)
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

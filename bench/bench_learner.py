"""Learner: tokens/s and peak memory of one optimizer step; MFU on a GPU.

    .venv/bin/python -m bench.bench_learner --rows 4    # CPU: whole update vs plain HF step,
                                                        # interleaved, 5 steps (~4 min quiet)
    .venv/bin/python -m bench.bench_learner --separate  # CPU, each side in its own process
    .venv/bin/python -m bench.bench_learner --quick     # 4 × 256 tokens, 1 timed step
    python -m bench.bench_learner --device cuda --model-size 0.5b   # GPU: MFU (random init)
    .venv/bin/python -m bench.bench_learner --world-size 1,2  # FSDP2 ranks (gloo on CPU)
    .venv/bin/python -m bench.bench_learner --default-config --rows 6 --steps 2 --repeats 2
        # configs/default.yaml's learner as is vs before the memory changes: peak RSS and
        # tokens/s (wall and per CPU second), in alternating pairs (bench/learner_default_config.py)

CPU default: the whole update as the config runs it (micro-batching, the proximal pass where
the config runs one, `optimize`) and a plain HF step alternate in one spawned process on one
model, `--steps` rounds after a warm-up, the order flipping every round; each side's step
seconds as median (min–max) and the per-round ratio plain / ours, so machine load hits both
(bench/learner_interleaved.py). `--separate` and CUDA: as below (bench/learner_step.py);
`--world-size`: bench/learner_world_size.py.

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
import os
import tempfile

from bench.learner_common import MODEL, peak_tflops, random_qwen2_dir
from bench.learner_default_config import DEFAULT_SHAPES, run_default_config
from bench.learner_interleaved import run_interleaved
from bench.learner_step import run_config
from bench.learner_world_size import run_world_sizes
from bench.stats import load_line


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
    ap.set_defaults(bf16_copy=True)
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
            rows = [(f"plain HF step, {prec}", plain),
                    (f"PolicyTrainer, {'bf16 copy' if bf16 else prec}", ours)]
            if bf16:  # the trainer's default bf16 copy (above) against autocast alone
                args.bf16_copy = False
                rows.append(("PolicyTrainer, autocast only", run_config("ours", bf16, args,
                                                                        model_path)))
                args.bf16_copy = True
            for label, r in rows:
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

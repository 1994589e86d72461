"""Learner peak memory for 100-step episodes against the memory preflight's estimate.

    .venv/bin/python -m bench.bench_learner_long_sequences
    .venv/bin/python -m bench.bench_learner_long_sequences --observations 40 --steps 50 \
        --out bench/results/learner_long_sequences/run.json

configs/world.yaml's learner (SmolLM2-135M-Instruct, bf16 autocast on the bf16 working copy
where this CPU runs bf16 faster, whole-layer recompute, LM head in 512-token chunks, jemalloc,
1 torch thread) with the `full` context builder: each synthetic episode is one instruction
(`--instruction` tokens) and `--steps` turns of `--action` action tokens and an observation
(tool reply), every step's context the previous step's context + action + observation, so
`learner.pack_steps` packs the whole episode into one sequence of instruction + (steps − 1) ×
(action + observation) + action tokens. One episode per `--observations` entry (its
observation tokens): 100-step episodes of 6,430, 5,440 and 4,450 tokens by default.
`model.max_model_len` and `learner.micro_batch_tokens` are the longest of them rounded up to
256 (the smallest budget a launch accepts: a micro-batch holds at least one whole sequence),
so each episode is one micro-batch.

A fresh process, started as a launch starts its learner (`learner_process_env`: jemalloc
preloaded), first runs a one-row update, so that AdamW's state and the gradients are resident
as in every later update of a run, then `--updates` updates of the episodes, each
`PolicyTrainer.optimize` followed by a publish in the engines' dtype and the per-update purge
(as `Learner.update`). Peak = the process's `ru_maxrss`; the estimate = the sum of
`learner_parts` (run/preflight/memory.py) for the same config. The largest micro-batch's padded
tokens are reported against `learner.micro_batch_tokens`. About 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.stats import cpu_and_amx

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "world.yaml"


def episode_length(args: argparse.Namespace, observation: int) -> int:
    """Tokens of a packed episode: its last step's context + action."""
    return args.instruction + (args.steps - 1) * (args.action + observation) + args.action


def longest(args: argparse.Namespace) -> int:
    return episode_length(args, max(args.observations))


def overrides(args: argparse.Namespace) -> list[str]:
    budget = -(-longest(args) // 256) * 256
    return ["learner.device=cpu", "context.builder=full", f"env.max_turns={args.steps}",
            f"model.max_model_len={budget}", f"learner.micro_batch_tokens={budget}",
            *args.set]


def synthetic_episode_rows(args: argparse.Namespace, vocab: int, episode: int,
                           observation: int, prompt: list[int] | None = None) -> list:
    """One episode's rows, each step's context extending the previous context + action +
    `observation` tool-reply tokens; it starts with `prompt` (the group's, shared) or
    `args.instruction` random tokens of its own."""
    import random

    from agent_r1_async.learner.batching import Row

    rng = random.Random(episode)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    context = list(prompt) if prompt is not None else tokens(args.instruction)
    rows = []
    for t in range(args.steps):
        action = tokens(args.action)
        rows.append(Row(context_ids=list(context), action_ids=action,
                        behavior_logprobs=[-rng.random() * 3 for _ in action],
                        token_versions=[0] * args.action, advantage=rng.gauss(0, 1),
                        reward=0.0, sample_weight=1.0, group_index=0, episode_index=episode,
                        step_index=t, ids=("g0", f"e{episode}")))
        context += action + tokens(observation)
    return rows


def rss_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    with open("/proc/self/status") as f:
        return 1024 * next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (ru_maxrss, KiB on Linux)."""
    import resource

    return 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> None:
    import time

    import torch

    from agent_r1_async import models
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import batching, memory_savers
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.set_num_threads(1)
    cfg = load_config(str(CONFIG), overrides(args))
    tr = PolicyTrainer(cfg, models.resolve_model(cfg.model.name_or_path))
    vocab = tr._causal_lm().config.vocab_size
    loaded = peak_rss_bytes()
    # A one-row update first: AdamW's state and the gradients are resident from then on, as in
    # every update of a run after its first.
    warm = synthetic_episode_rows(argparse.Namespace(**{**vars(args), "steps": 1}), vocab, 99, 1)
    tr.optimize(batching.make_micro_batches(warm, cfg.learner.micro_batch_tokens, tr.pad_id), 0)
    rows = [r for e, obs in enumerate(args.observations)
            for r in synthetic_episode_rows(args, vocab, e, obs)]
    seqs = batching.training_sequences(rows, cfg.learner.pack_steps)
    seconds, padded, before, after = [], [], [], []
    for _ in range(args.updates):
        mbs = batching.sequences_to_micro_batches(rows, seqs, cfg.learner.micro_batch_tokens,
                                                  tr.pad_id)
        padded += [mb.num_tokens for mb in mbs]
        before.append(rss_bytes())
        t0 = time.perf_counter()
        tr.optimize(mbs, 0)
        seconds.append(time.perf_counter() - t0)
        after.append(peak_rss_bytes())
        tr.published_state_dict(tr.publish_dtype)
        memory_savers.release_free_memory()
    print(json.dumps({
        "loaded_bytes": loaded, "peak_bytes": peak_rss_bytes(),
        "rss_before_update_bytes": before, "peak_after_update_bytes": after,
        "update_s": seconds, "sequences": len(seqs), "micro_batches": len(padded) // args.updates,
        "padded_tokens_max": max(padded), "bf16": tr.bf16,
    }))


def estimate(args: argparse.Namespace) -> tuple[dict[str, float], int]:
    from agent_r1_async.config import load_config
    from agent_r1_async.run.preflight import memory

    cfg = load_config(str(CONFIG), overrides(args))
    dims = memory.model_dims(cfg.model.name_or_path)
    assert dims is not None, f"{cfg.model.name_or_path} is not on disk"
    return memory.learner_parts(cfg, dims), cfg.learner.micro_batch_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="turns per episode")
    ap.add_argument("--updates", type=int, default=1)
    ap.add_argument("--instruction", type=int, default=470, help="instruction tokens")
    ap.add_argument("--action", type=int, default=20, help="action tokens per step")
    ap.add_argument("--observations", type=int, nargs="+", default=[40, 30, 20],
                    help="tool-reply tokens per step, one number per episode of an update")
    ap.add_argument("--set", nargs="*", default=[], help="more key=value overrides")
    ap.add_argument("--out", help="write the result as JSON here too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import memory_savers
    from agent_r1_async.run.preflight.memory import GB

    lc = load_config(str(CONFIG), overrides(args)).learner
    env = {**os.environ, **memory_savers.learner_process_env(lc.allocator)}
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-m", "bench.bench_learner_long_sequences", "--child",
                          *sys.argv[1:]], env=env, capture_output=True, text=True,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    parts, budget = estimate(args)
    est = sum(parts.values())
    peak = measured["peak_bytes"]
    cpu, amx = cpu_and_amx()
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python -m bench.bench_learner_long_sequences",
                             *sys.argv[1:]]),
        "cpu": cpu, "amx": amx, "cores": os.cpu_count(),
        "load": [load_before, os.getloadavg()[0]],
        "overrides": overrides(args),
        "episode_tokens": [episode_length(args, o) for o in args.observations],
        "micro_batch_tokens": budget, **measured,
        "estimate_gb": est / GB, "estimate_parts_gb": {k: v / GB for k, v in parts.items()},
        "peak_gb": peak / GB, "estimate_over_peak": est / peak,
    }
    lengths = "/".join(str(episode_length(args, o)) for o in args.observations)
    print(f"## Learner at long sequences: {len(args.observations)} x {args.steps}-step episodes "
          f"of {lengths} tokens, micro_batch_tokens {budget}; {cpu} "
          f"({'AMX' if amx else 'no AMX'}), {os.cpu_count()} cores, load "
          f"{load_before:.1f}-{os.getloadavg()[0]:.1f}")
    print(f"micro-batches {measured['micro_batches']} per update, largest "
          f"{measured['padded_tokens_max']} padded tokens (budget {budget}: "
          f"{'within' if measured['padded_tokens_max'] <= budget else 'OVER'}); bf16 "
          f"{measured['bf16']}; update {', '.join(f'{s:.0f}' for s in measured['update_s'])} s")
    print("estimate: " + ", ".join(f"{k} {v / GB:.2f}" for k, v in parts.items()) + " GB")
    rise = max(a - b for a, b in zip(measured["peak_after_update_bytes"],
                                     measured["rss_before_update_bytes"], strict=True))
    print(f"peak RSS {peak / GB:.2f} GB (after loading {measured['loaded_bytes'] / GB:.2f}; "
          f"an update's rise over its start {rise / GB:.2f}); preflight estimate "
          f"{est / GB:.2f} GB = {est / peak:.2f}x the peak")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Prefix trees under the attention cost: one learner update of a world-shaped group, its
members in one tree row as token counts alone plan it (ρ = 0) against the planner that weighs
the row's attention pairs (`PolicyTrainer.attention_cost`, the default).

    .venv/bin/python -m bench.bench_tree_cost --members 4 --steps 24 --budget 8192
    .venv/bin/python -m bench.bench_tree_cost --members 2 --steps 2 --repeats 1  # smoke

configs/world.yaml's learner (SmolLM2-135M-Instruct, bf16 where this CPU runs it faster,
whole-layer recompute, step packing, `learner.shared_prefix`), `learner.micro_batch_tokens`
= `--budget`, `--threads` torch threads (1, as a launched learner). A group of `--members`
episodes that share an `--instruction`-token prompt, each `--steps` turns of `--action` random
action tokens and `--observation` reply tokens (the `full` builder: each packed episode one
sequence of instruction + steps × (action + observation) − observation tokens). Under a tree
mask the attention kernels compute every query-key pair of the row, so a tree of long
suffixes can cost more than its members apart (learner/prefix_tree.py, "Planning").

Per repeat, in alternating order after one warm-up round, one `optimize` of the group each
way; printed: each side's rows (tokens of each), the planner's cost in token-equivalents,
update seconds (mean ± 95 % t interval), the per-repeat ratio ρ=0 / weighed with its interval,
and the load.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from bench.bench_learner_long_sequences import synthetic_episode_rows
from bench.stats import fmt_ci, load_line

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "world.yaml"


def group_rows(args: argparse.Namespace, vocab: int, seed: int = 0) -> list[Any]:
    """The group's rows: one shared prompt, then each member's own turns."""
    rng = random.Random(seed)
    prompt = [rng.randrange(3, vocab) for _ in range(args.instruction)]
    return [r for m in range(args.members)
            for r in synthetic_episode_rows(args, vocab, m, args.observation, prompt)]


def plan(rows: list[Any], budget: int, rho: float) -> tuple[list[Any], list[Any]]:
    """(sub-trees, micro-batches) of the group, as the learner plans them at `rho`."""
    from agent_r1_async.learner import batching

    seqs = batching.training_sequences(rows, True)
    trees = batching.plan_trees(rows, seqs, budget, True, rho)
    return trees, batching.trees_to_micro_batches(rows, seqs, trees, budget, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--instruction", type=int, default=470)
    ap.add_argument("--action", type=int, default=20)
    ap.add_argument("--observation", type=int, default=40)
    ap.add_argument("--budget", type=int, default=8192, help="learner.micro_batch_tokens")
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds after one warm-up")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="extra config override a.b=v")
    args = ap.parse_args()

    import torch

    from agent_r1_async import models
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import prefix_tree
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.set_num_threads(args.threads)
    cfg = load_config(str(CONFIG), ["learner.device=cpu", f"model.max_model_len={args.budget}",
                                    f"learner.micro_batch_tokens={args.budget}", *args.set])
    tr = PolicyTrainer(cfg, models.resolve_model(cfg.model.name_or_path))
    rho = tr.attention_cost
    rows = group_rows(args, tr._causal_lm().config.vocab_size)
    sides = {"rho=0": 0.0, "weighed": rho}
    print(f"## prefix trees under the attention cost: {args.members} members × {args.steps} "
          f"turns after a {args.instruction}-token prompt, budget {args.budget}, ρ = {rho:.3g}, "
          f"bf16 {tr.bf16}, {args.threads} thread(s); {load_line()}", flush=True)
    plans = {name: plan(rows, args.budget, r) for name, r in sides.items()}
    for name, (trees, mbs) in plans.items():
        cost = sum(prefix_tree.row_cost(t.tokens, rho) for t in trees)
        print(f"{name}: rows {[t.tokens for t in trees]}, {len(mbs)} micro-batches, "
              f"cost {cost:,.0f} token-equivalents", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for rnd in range(args.repeats + 1):
        for name in (names if rnd % 2 == 0 else names[::-1]):
            mbs = plan(rows, args.budget, sides[name])[1]  # fresh: an update may fill them
            t0 = time.perf_counter()
            tr.optimize(mbs, 0)
            if rnd:  # the first round warms up
                seconds[name].append(time.perf_counter() - t0)
        if rnd:
            print(f"round {rnd}: " + ", ".join(f"{n} {seconds[n][-1]:.1f} s" for n in names)
                  + f"; {load_line()}", flush=True)
    for name in names:
        print(f"{name}: update {fmt_ci(seconds[name], 1)} s")
    ratios = [a / b for a, b in zip(seconds["rho=0"], seconds["weighed"], strict=True)]
    print(f"ratio rho=0 / weighed: {fmt_ci(ratios, 2)}; {load_line()}")


if __name__ == "__main__":
    main()

"""Context builders at a window the episode outgrows: `compact` against `last_k` and `truncate`
on the world env, each after the same warm-start recipe and RL budget, paired by seed.

    .venv/bin/python -m bench.bench_context_builders --seeds 0 1 2

Every builder sees the same task: configs/world.yaml at its `long` preset (median optimal
plan 40 actions) with `env.max_turns` 100 in a `model.max_model_len` of 1,024 tokens, about a
third of what a 100-step history needs (`WINDOW`). Each builder keeps the episode inside it its
own way (`BUILDERS`): `compact` asks the agent for a summary when the context would pass 800
tokens (its demonstrations carry the world's own summaries), `last_k` keeps the last 6 turns,
`truncate` the newest turns within 960 tokens.

Per seed s and builder B (seed-major, so a stopped run leaves whole seeds; OUT/B holds B's
files), bench_sft_vs_rl's `arms` stage with best SFT pinned to `--demos` × `--epochs` (one
recipe for every builder, not a sweep per builder): `best_sft`, the warm start on oracle
demonstrations rendered by B (its own sample and order per seed), and `rl_step`,
`--updates` GRPO updates from it (`RL`: groups of 4, one group per update; `--budget-s` only
caps the launch), the same RL for every builder on any machine; each evaluated on the first
`--test-tasks` test tasks at sampling seed s. The summary (OUT/table.md, OUT/results.json)
gives per builder and seed `--metric` (default `progress`: the share of the optimal plan's distance the episode closed; `success`
beside it), the mean steps, and for `compact` the summaries per episode, their mean length and
success after a compaction (from the evaluation rows), with paired 95 % t intervals of
compact − last_k and compact − truncate after RL and after the warm start.

Cost: `--plan` prints what each builder's cell asks of the learner, from the demonstrations
rendered and batched as the warm start batches them, in token-equivalents (tokens plus the
attention's pairs), and the hours at a forward+backward rate (`--tokens-per-s`, from
bench_learner_mfu on the machine). A builder whose contexts do not extend each other (last_k,
truncate) trains every step's ~900-token context on its own: ~1,000 token-equivalents a step
against compact's ~290, whose segments pack. BENCHMARKS.md ("Context builders in a small
window: what a cell costs") has the table and the rates measured by machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench import bench_sft_vs_rl as sft_vs_rl
from bench.cli_runs import ROOT
from bench.stats import load_line

WINDOW = ["env.args.horizon=long", "env.max_turns=100", "model.max_model_len=1024"]
"""A 100-step episode's full history is ~6,400 tokens: the window holds about a sixth."""
BUILDERS: dict[str, list[str]] = {
    "compact": ["context.builder=compact", "context.max_tokens=800",
                "context.summary_max_tokens=160"],
    "last_k": ["context.builder=last_k", "context.last_k=6"],
    "truncate": ["context.builder=truncate", "context.max_tokens=960"],
}
"""Each builder's keys: every context and action fits 1,024 tokens (a ~470-token instruction,
~60-token turns, 48-token actions; a summary of at most 160 tokens after an 800-token context
and the request)."""
COSTED: dict[str, list[str]] = {
    "truncate to 720": ["context.builder=truncate", "context.max_tokens=960",
                        "context.truncate_to=720"],
}
"""Builders `--plan` costs beside the table's: `truncate` cutting to 720 tokens (about half
the turns the window holds), so that the steps between cuts extend one another."""
RL = ["algorithm.group_size=4", "algorithm.batch_groups=1"]
"""An update of 4 episodes: one of 16 at 100 steps would ask ~1.7 M token-equivalents of a
last_k learner (`--plan`), hours on a 2-core CPU."""
COMPARED = (("compact", "last_k"), ("compact", "truncate"))
COMPACTION = ("context/compactions", "context/summary_tokens", "context/success_after_compaction")


def builder_args(args: argparse.Namespace, builder: str, seed: int) -> argparse.Namespace:
    """bench_sft_vs_rl's arguments for one builder's cell at `seed`."""
    b = sft_vs_rl.parser().parse_args(["--config", str(args.config), "--stage", "arms"])
    vars(b).update(
        overrides=[*WINDOW, *BUILDERS[builder], *RL, *args.overrides], out=args.out / builder,
        seeds=[seed], arms=["best_sft", "rl_step"], split="test", test_tasks=args.test_tasks,
        metric=args.metric, tiebreak=None, budget_s=args.budget_s,
        budget_updates=args.updates, max_fresh_demos=0,
        horizon_bins=args.horizon_bins)
    return b


def run(args: argparse.Namespace) -> None:
    for seed in args.seeds:
        for builder in BUILDERS:
            b = builder_args(args, builder, seed)
            best = b.out / "best.json"
            if not best.exists():  # the pinned recipe stands in for a sweep's choice
                b.out.mkdir(parents=True, exist_ok=True)
                best.write_text(json.dumps({"demos": args.demos, "epochs": args.epochs,
                                            "pinned": True}))
            print(f"## seed {seed}, {builder}; {load_line()}", flush=True)
            sft_vs_rl.arms(b)


def plan(args: argparse.Namespace) -> str:
    """What a cell asks of the learner, per builder, without training: best SFT's
    demonstrations (the first `--demos` in the config's order) rendered by the builder and
    batched as the warm start batches them (step packing, prefix trees, `learner.micro_batch_tokens`),
    in token-equivalents (tokens + ρ × each row's attention pairs, learner/prefix_tree.py).
    An RL update trains `algorithm.group_size` × `batch_groups` episodes at about the same
    cost per step; its episodes run from the demonstrations' length up to `env.max_turns`.
    `--tokens-per-s`: the learner's forward+backward rate on this machine (bench_learner_mfu's
    fwd+bwd tokens per second) turns token-equivalents into hours."""
    from transformers import AutoModelForCausalLM

    from agent_r1_async.config import load_config
    from agent_r1_async.learner.prefix_tree import row_cost
    from agent_r1_async.learner.trainer import model_attention_cost
    from agent_r1_async.models import load_tokenizer, resolve_model
    from agent_r1_async.sft.demos import DemoStats
    from agent_r1_async.sft.train import chain_pairs, demo_pairs, load_demos, sft_micro_batches

    path = resolve_model(load_config(args.config, args.overrides).model.name_or_path)
    tok = load_tokenizer(path)
    rho = model_attention_cost(AutoModelForCausalLM.from_pretrained(path))  # as the trainer's

    lines = [f"# What a cell trains, per builder ({args.demos} demonstrations in the config's order; "
             f"{', '.join(WINDOW)})", "",
             "| builder | steps / demo | sequences / demo | SFT token-eq / epoch | per step | "
             f"RL update token-eq (demo length … max_turns) | SFT + {args.updates} updates, h |",
             "|---|---|---|---|---|---|---|"]
    for builder, keys in {**BUILDERS, **COSTED}.items():
        cfg = load_config(args.config, [*WINDOW, *keys, *RL,
                                        f"sft.num_demos={args.demos}", *args.overrides])
        demos = load_demos(cfg, tok, DemoStats())
        lc, b = cfg.learner, cfg.sft.batch_episodes
        cost = 0.0
        for start in range(0, len(demos), b):
            mbs = sft_micro_batches(demo_pairs(demos[start:start + b]), lc.micro_batch_tokens,
                                    tok.pad_token_id or 0, pack=lc.pack_steps,
                                    shared_prefix=lc.shared_prefix, rho=rho)
            cost += sum(row_cost(int(n), rho) for mb in mbs
                        for n in mb.attention_mask.sum(dim=1).tolist())
        steps = sum(len(d.steps) for d in demos)
        per_step = cost / steps
        sequences = sum(len(chain_pairs(demo_pairs([d]))) for d in demos) / len(demos)
        episodes = cfg.algorithm.group_size * cfg.algorithm.batch_groups
        low, high = per_step * episodes * steps / len(demos), per_step * episodes * cfg.env.max_turns
        hours = [(cost * cfg.sft.epochs + args.updates * u) / args.tokens_per_s / 3600
                 for u in (low, high)]
        lines.append(f"| {builder} | {steps / len(demos):.1f} | {sequences:.1f} | {cost:,.0f} | "
                     f"{per_step:,.0f} | {low:,.0f} … {high:,.0f} | "
                     f"{hours[0]:.1f} … {hours[1]:.1f} |")
    lines += ["", f"Hours at {args.tokens_per_s:g} token-equivalents/s (forward+backward); "
              f"{cfg.sft.epochs} epochs; an update of {episodes} episodes."]
    text = "\n".join(lines) + "\n"
    print(text)
    return text


def episode_means(rows_path: str, metric: str) -> dict[str, float]:
    """Means over an evaluation's rows: `metric` and success (a row without them counts 0),
    steps, and the compaction metrics over the rows that report them."""
    rows = [json.loads(x) for x in Path(rows_path).read_text().splitlines()]
    out = {metric: sft_vs_rl.metric_of(rows, metric),
           "success": sft_vs_rl.metric_of(rows, "success"),
           "steps": statistics.fmean(r["steps"] for r in rows)}
    for name in COMPACTION:
        vals = [r["metrics"][name] for r in rows if name in r["metrics"]]
        if vals:
            out[name] = statistics.fmean(vals)
    return out


def summarize(args: argparse.Namespace) -> str:
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for builder in BUILDERS:
        path = args.out / builder / "arms.json"
        done = json.loads(path.read_text()) if path.exists() else {}
        for seed, arms in done.items():
            for arm, r in arms.items():
                results.setdefault(builder, {}).setdefault(arm, {})[seed] = episode_means(
                    r["rows"], args.metric)
    lines = [f"# Context builders in a 1,024-token window ({args.metric}, test)", "",
             f"Recipe: {args.demos} demonstrations × {args.epochs} epochs, then "
             f"{args.updates} GRPO updates ({', '.join(RL)}); {', '.join(WINDOW)}.", "",
             f"| builder | arm | {args.metric} per seed | mean ± sd | success | steps | "
             "summaries / episode | summary tokens | success after a compaction |",
             "|---|---|---|---|---|---|---|---|---|"]
    for builder, arms in results.items():
        for arm in ("best_sft", "rl_step"):
            per_seed = arms.get(arm, {})
            if not per_seed:
                continue
            vals = [m[args.metric] for m in per_seed.values()]

            def mean_of(name: str, per_seed: dict[str, dict[str, float]] = per_seed) -> str:
                got = [x[name] for x in per_seed.values() if name in x]
                return f"{statistics.fmean(got):.2f}" if got else "–"

            lines.append(
                f"| {builder} | {arm} | "
                + ", ".join(f"s{s} {x[args.metric]:.3f}" for s, x in sorted(per_seed.items()))
                + f" | {sft_vs_rl.spread(vals)} | {mean_of('success')} | {mean_of('steps')} | "
                + " | ".join(mean_of(n) for n in COMPACTION) + " |")
    lines.append("")
    for arm in ("rl_step", "best_sft"):
        for a, b in COMPARED:
            ra, rb = results.get(a, {}).get(arm, {}), results.get(b, {}).get(arm, {})
            seeds = sorted(set(ra) & set(rb), key=int)
            if seeds:
                lines.append(sft_vs_rl.paired_line(
                    f"{arm}: {a} − {b}", [int(s) for s in seeds],
                    [ra[s][args.metric] - rb[s][args.metric] for s in seeds]))
    text = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs/world.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/context_builders")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--demos", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--updates", type=int, default=2, help="RL updates per rl_step arm")
    ap.add_argument("--budget-s", type=float, default=6 * 3600.0,
                    help="the RL launch's wall-clock cap (it stops at --updates first)")
    ap.add_argument("--test-tasks", type=int, default=30)
    ap.add_argument("--metric", default="progress")
    ap.add_argument("--horizon-bins", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    ap.add_argument("--summarize", action="store_true", help="only the table from OUT")
    ap.add_argument("--plan", action="store_true",
                    help="only what each builder's cell trains (token-equivalents), no training")
    ap.add_argument("--tokens-per-s", type=float, default=90.0,
                    help="--plan: the learner's forward+backward tokens/s on this machine")
    args = ap.parse_args()
    args.config, args.out = args.config.resolve(), args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_line()}; "
          f"out {args.out}", flush=True)
    if args.plan:
        plan(args)
        return
    if not args.summarize:
        run(args)
    summarize(args)


if __name__ == "__main__":
    main()

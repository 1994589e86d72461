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
`--budget-s` of GRPO from it; each evaluated on the first `--test-tasks` test tasks at sampling
seed s. The summary (OUT/table.md, OUT/results.json) gives per builder and seed `--metric`
(default `progress`: the share of the optimal plan's distance the episode closed; `success`
beside it), the mean steps, and for `compact` the summaries per episode, their mean length and
success after a compaction (from the evaluation rows), with paired 95 % t intervals of
compact − last_k and compact − truncate after RL and after the warm start.

Cost on a 2-core CPU: a builder whose contexts do not extend each other (last_k, truncate)
trains every step's ~900-token context on its own, so a cell (warm start, RL, two evaluations)
takes 1–1.5 h there; a whole seed 3–4.5 h.
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
COMPARED = (("compact", "last_k"), ("compact", "truncate"))
COMPACTION = ("context/compactions", "context/summary_tokens", "context/success_after_compaction")


def builder_args(args: argparse.Namespace, builder: str, seed: int) -> argparse.Namespace:
    """bench_sft_vs_rl's arguments for one builder's cell at `seed`."""
    b = sft_vs_rl.parser().parse_args(["--config", str(args.config), "--stage", "arms"])
    vars(b).update(
        overrides=[*WINDOW, *BUILDERS[builder], *args.overrides], out=args.out / builder,
        seeds=[seed], arms=["best_sft", "rl_step"], split="test", test_tasks=args.test_tasks,
        metric=args.metric, tiebreak=None, budget_s=args.budget_s, max_fresh_demos=0,
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
             f"{args.budget_s / 60:g} min of GRPO; {', '.join(WINDOW)}.", "",
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
    ap.add_argument("--budget-s", type=float, default=1200.0)
    ap.add_argument("--test-tasks", type=int, default=30)
    ap.add_argument("--metric", default="progress")
    ap.add_argument("--horizon-bins", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    ap.add_argument("--summarize", action="store_true", help="only the table from OUT")
    args = ap.parse_args()
    args.config, args.out = args.config.resolve(), args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_line()}; "
          f"out {args.out}", flush=True)
    if not args.summarize:
        run(args)
    summarize(args)


if __name__ == "__main__":
    main()

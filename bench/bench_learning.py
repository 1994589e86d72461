"""Learning demonstration: the default launch over several seeds, held-out reward before/after.

    .venv/bin/python -m bench.bench_learning                       # 3 seeds, ~20 min each here
    .venv/bin/python -m bench.bench_learning --seeds 0 --set learner.total_updates=5
    .venv/bin/python -m bench.bench_learning --runs runs/learn-s0-* runs/learn-s1-*  # summarize
    .venv/bin/python -m bench.bench_learning --config configs/mcp_example.yaml  # another config
    .venv/bin/python -m bench.bench_learning --precision-parity --set learner.total_updates=12 \
        --set eval.num_tasks=100                                   # fp32 vs bf16, 3 seeds each

`--precision-parity`: two arms per seed, `fp32` (engine.dtype=float32, learner.bf16=false)
and `bf16` (engine.dtype=bfloat16, learner.bf16=true), run one after the other in an order
that alternates by seed; each arm trains its own warm start in its own precision (cached).
It prints each arm's held-out success after RL (mean ± 95 % t interval over seeds), the
paired difference bf16 − fp32 per seed, and the seconds per update of each arm.

Each seed is one `agent-r1-async launch` of `configs/default.yaml` (or `--config`, plus any `--set`) with
`actors.seed` and `buffer.seed` set to the seed, so the episodes sampled differ between seeds;
the supervised warm start is trained by the first launch and reused by the others (its cache
key does not include those seeds). Every launch evaluates the warm-started policy (version 0)
and its final checkpoint on the dev split (`eval.num_tasks` tasks, T = 1) and writes
RUN_DIR/eval.json. This prints, per seed, the held-out success before and after RL, the RL
wall time and updates, then the mean gain and its spread over seeds, and writes one PNG with
every seed's training curve and held-out points (`--plot`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.report import read_metrics
from bench.stats import fmt_ci, mean_ci, mean_sd

ROOT = Path(__file__).resolve().parents[1]

ARMS = {"fp32": ["engine.dtype=float32", "learner.bf16=false"],
        "bf16": ["engine.dtype=bfloat16", "learner.bf16=true"]}


def run_seed(seed: int, overrides: list[str], name: str = "learn",
             config: Path | None = None) -> Path:
    cmd = [str(ROOT / ".venv/bin/agent-r1-async"), "launch", "--set", f"launch.name={name}-s{seed}",
           "--set", f"actors.seed={seed}", "--set", f"buffer.seed={seed}"]
    if config is not None:
        cmd[2:2] = ["--config", str(config)]
    for o in overrides:
        cmd += ["--set", o]
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
        raise SystemExit(f"seed {seed}: launch failed ({out.returncode})")
    return Path(out.stdout.split("[launch] run directory: ")[-1].strip())


def summarize(run_dir: Path, metric: str) -> dict[str, Any]:
    ev = json.loads((run_dir / "eval.json").read_text())
    rows = read_metrics(run_dir)
    updates = [r for r in rows if "reward/mean" in r]
    t0 = next(r["time"] for r in rows if f"eval/before/{metric}" in r)
    return {
        "run": run_dir.name,
        "before": ev["before"][metric],
        "after": ev["after"][metric],
        "gain": ev["after"][metric] - ev["before"][metric],
        "tasks": int(ev["before"]["episodes"]),
        "updates": int(updates[-1]["update"]) if updates else 0,
        "rl_min": (updates[-1]["time"] - t0) / 60 if updates else 0.0,
        "s_per_update": statistics.median(r["learner/update_time_s"] for r in updates)
        if updates else float("nan"),
        "peak_gb": max((r.get("learner/peak_memory_gb", 0.0) for r in updates), default=0.0),
        # the training episodes' own rate of the held-out metric (env/success, env/correct, ...)
        "curve": [(r["update"], r["reward/mean"], r.get(f"env/{metric}")) for r in updates],
    }


def plot(results: list[dict[str, Any]], metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(results):
        color = f"C{i}"
        xs = [u for u, _, s in r["curve"] if s is not None]
        ys = [s for _, _, s in r["curve"] if s is not None]
        smooth = [statistics.fmean(ys[max(0, j - 4): j + 1]) for j in range(len(ys))]
        ax1.plot(xs, ys, "o", color=color, alpha=0.25, ms=3)
        label = r["run"].split("-20")[0]  # learn-s0-20261122-152143 -> learn-s0
        ax1.plot(xs, smooth, "-", color=color, label=label)
        # two evaluations, nothing measured between them: points, not a line
        ax2.plot([0], [r["before"]], "o", color=color, mfc="none", label=f"{label} before")
        ax2.plot([r["updates"]], [r["after"]], "o", color=color, label=f"{label} after")
    ax1.set(xlabel="update (learner version)", ylabel=f"train {metric} (batch; line: mean of 5)",
            title="training episodes")
    ax2.set(xlabel="update (learner version)", ylabel=f"held-out {metric}",
            title=f"held-out dev split, {results[0]['tasks']} tasks, T=1")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", type=Path, help="launch this config instead of the default one")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--runs", nargs="+", type=Path, help="summarize these finished runs instead")
    ap.add_argument("--metric", default="success", help="held-out metric (eval.json key)")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "learning.png")
    ap.add_argument("--precision-parity", action="store_true",
                    help="fp32 vs bf16 arms at every seed (module docstring)")
    args = ap.parse_args()
    if args.precision_parity:
        parity(args)
        return
    name = args.config.stem if args.config else "learn"
    runs = args.runs or [run_seed(s, args.overrides, name, args.config) for s in args.seeds]
    results = [summarize(r, args.metric) for r in runs]
    print(f"\n## Held-out {args.metric} before/after RL ({args.config or 'default config'}"
          f"{', ' + ', '.join(args.overrides) if args.overrides else ''})")
    print(f"{'run':<34} {'before':>7} {'after':>7} {'gain':>7} {'updates':>8} {'RL min':>7}")
    for r in results:
        print(f"{r['run']:<34} {r['before']:7.3f} {r['after']:7.3f} {r['gain']:+7.3f} "
              f"{r['updates']:8d} {r['rl_min']:7.1f}")
    gains = [r["gain"] for r in results]
    mean, spread = mean_sd(gains)
    print(f"mean gain {mean:+.3f} (std over seeds {spread:.3f}, "
          f"min {min(gains):+.3f}); mean before {statistics.fmean(r['before'] for r in results):.3f}")
    if len(gains) > 1:
        print(f"gain {fmt_ci(gains)} (95 % t); after {fmt_ci([r['after'] for r in results])}, "
              f"before {fmt_ci([r['before'] for r in results])}")
    plot(results, args.metric, args.plot)
    print(f"plot: {args.plot}")


def parity(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    for i, seed in enumerate(args.seeds):
        for arm in list(ARMS) if i % 2 == 0 else list(ARMS)[::-1]:
            run = run_seed(seed, [*ARMS[arm], *args.overrides], name=f"parity-{arm}")
            results[arm].append(summarize(run, args.metric))
            r = results[arm][-1]
            print(f"{arm} seed {seed}: {r['run']} before {r['before']:.3f} after {r['after']:.3f} "
                  f"updates {r['updates']} {r['s_per_update']:.1f} s/update, RL {r['rl_min']:.1f} "
                  f"min, learner peak {r['peak_gb']:.2f} GB", flush=True)
    print(f"\n## Precision parity: held-out {args.metric} after RL, {len(args.seeds)} seeds "
          f"({', '.join(args.overrides) or 'default config'})")
    for arm, rs in results.items():
        print(f"{arm}: after {fmt_ci([r['after'] for r in rs])}, before "
              f"{fmt_ci([r['before'] for r in rs])}, gain {fmt_ci([r['gain'] for r in rs])}, "
              f"s/update {fmt_ci([r['s_per_update'] for r in rs], 1)}, RL min "
              f"{fmt_ci([r['rl_min'] for r in rs], 1)}, learner peak "
              f"{max(r['peak_gb'] for r in rs):.2f} GB")
    diffs = [b["after"] - f["after"] for f, b in zip(results["fp32"], results["bf16"], strict=True)]
    m, h = mean_ci(diffs)
    print(f"bf16 − fp32 after RL, paired by seed: {', '.join(f'{d:+.3f}' for d in diffs)}; "
          f"mean {m:+.3f} ± {h:.3f} (95 % t)")
    speed = [f["s_per_update"] / b["s_per_update"]
             for f, b in zip(results["fp32"], results["bf16"], strict=True)]
    print(f"fp32 / bf16 seconds per update, per seed: {', '.join(f'{x:.2f}×' for x in speed)}")


if __name__ == "__main__":
    main()

"""bench/bench_shared_prefix.py `--launches`: end-to-end samples/s of whole launches with
`learner.shared_prefix` false (flat rows) against true (prefix trees), in alternating pairs.

Each launch is `agent-r1-async launch` on configs/default.yaml (or `--config`) with the
held-out evaluations off and `learner.total_updates` = `--updates`, run to its end. What is
timed is the steady state: episodes trained per second between the first update's metrics
record and the last one's (the first update, which waits for the engine to start, is left
out), and the mean update time without the learner's wait for data. The warm start must be
cached beforehand: a launch that trains it is marked "cold" in its line (and still counted).
Per pair, the ratio tree / flat; the mean ratio with its 95 % t interval over the pairs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from agent_r1_async.run.output.metrics_file import read_records
from bench.cli_runs import cli, run_logged, sets
from bench.stats import fmt_ci, load_line, mean_ci

ROOT = Path(__file__).resolve().parents[1]


def one_launch(config: str, overrides: list[str], updates: int, shared: bool, log: Path,
               run_root: Path) -> dict[str, float]:
    """One launch to its end; its steady-state samples/s and update time."""
    out = run_logged(cli("launch", "--config", config, *sets([
        "eval.in_launch=false", f"learner.total_updates={updates}",
        f"learner.shared_prefix={str(shared).lower()}", f"launch.run_root={run_root}",
        *overrides])), log)
    run_dir = Path(out.split("run directory: ")[-1].strip())
    recs = [r for r in read_records(run_dir / "metrics.jsonl") if "learner/update_time_s" in r]
    if len(recs) < 3:
        raise SystemExit(f"{log}: {len(recs)} updates logged, need ≥ 3")
    later = recs[1:]
    span = recs[-1]["time"] - recs[0]["time"]
    return {
        "samples_per_s": sum(r["learner/episodes"] for r in later) / span,
        "update_s": statistics.mean(r["learner/update_time_s"] - r["learner/data_wait_s"]
                                    for r in later),
        "idle": sum(r["learner/data_wait_s"] for r in later)
        / sum(r["learner/update_time_s"] for r in later),
        "computed": sum(r["learner/tokens_computed"] for r in later)
        / sum(r["learner/tokens_flat"] for r in later),
        "cold": float("warm start: training" in out),
    }


def run_launches(args: argparse.Namespace) -> None:
    print(f"## Shared-prefix end to end: {Path(args.config).name} launches, evaluations off, "
          f"{args.updates} updates each, updates 2–{args.updates} timed; {load_line()}",
          flush=True)
    sides = {"flat": False, "tree": True}
    res: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    logs = args.run_root / "logs"
    for i in range(args.repeats):
        order = list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]
        for name, shared in order:
            stamp = time.strftime("%H%M%S")
            row = one_launch(args.config, args.set, args.updates, shared,
                             logs / f"{name}-{i + 1}-{stamp}.log", args.run_root)
            res[name].append(row)
            print(f"pair {i + 1} {name}: {row['samples_per_s']:.3f} samples/s, update "
                  f"{row['update_s']:.2f} s, learner idle {row['idle']:.1%}, tokens computed "
                  f"{row['computed']:.3f} of flat{' (cold: trained the warm start)' if row['cold'] else ''}; "
                  f"{load_line()}", flush=True)
    for key, label in (("samples_per_s", "samples/s"), ("update_s", "update s")):
        for name, rows in res.items():
            print(f"{label}, {name}: {fmt_ci([r[key] for r in rows], 3)}")
        ratios = [t[key] / f[key] for t, f in zip(res["tree"], res["flat"], strict=True)]
        m, half = mean_ci(ratios)
        interval = (f"95 % interval [{m - half:.3f}, {m + half:.3f}]" if len(ratios) > 1
                    else "one pair: no interval")
        print(f"{label} tree / flat: {fmt_ci(ratios, 3)}; {interval}")
    print(f"# done; {load_line()}")

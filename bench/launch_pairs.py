"""Whole launches two ways in alternating pairs: the end-to-end cost of one setting.

Each launch is `agent-r1-async launch --config CONFIG` with the held-out evaluations off,
`learner.total_updates` = `updates` and one side's overrides, run to its end. What is timed is
the steady state: episodes trained per second between the first update's metrics record and the
last one's (the first update, which waits for the engine to start, is left out), the mean update
time without the learner's wait for data, the learner's idle share, and the actors' generated
tokens per second (`actors/tokens_per_s`, mean over the same records), the share of the flat
tokens computed and the mean share of rows of advantage 0. The warm start must be
cached beforehand: a launch that trains it is marked "cold" in its line (and still counted).
Per pair, the ratio second side / first side; the mean ratio with its 95 % t interval over the
pairs. Used by bench_shared_prefix.py `--launches`, bench_busy_wait.py and bench_zero_skip.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.metrics_file import read_records
from bench.cli_runs import cli, run_logged, sets
from bench.learner_common import DEFAULT_CONFIG
from bench.stats import fmt_ci, load_line, mean_ci

ROOT = Path(__file__).resolve().parents[1]

METRICS = (("samples_per_s", "samples/s"), ("update_s", "update s"),
           ("gen_tok_s", "generated tok/s"))
"""(row key, label) of what the summary compares."""


def one_launch(config: str, overrides: list[str], updates: int, log: Path,
               run_root: Path) -> dict[str, Any]:
    """One launch to its end; its steady-state figures (module docstring)."""
    out = run_logged(cli("launch", "--config", config, *sets([
        "eval.in_launch=false", f"learner.total_updates={updates}",
        f"launch.run_root={run_root}", *overrides])), log)
    run_dir = Path(out.split("run directory: ")[-1].strip())
    try:
        row = steady_state(list(read_records(run_dir / "metrics.jsonl")))
    except ValueError as e:
        raise SystemExit(f"{log}: {e}") from None
    return {**row, "cold": float("warm start: training" in out), "run_dir": str(run_dir)}


def steady_state(records: list[dict[str, Any]], min_updates: int = 3) -> dict[str, float]:
    """A launch's metrics records -> its figures over updates 2.. (module docstring); at
    least `min_updates` (≥ 2) updates must be logged."""
    recs = [r for r in records if "learner/update_time_s" in r]
    if len(recs) < max(min_updates, 2):
        raise ValueError(f"{len(recs)} updates logged, need ≥ {max(min_updates, 2)}")
    later = recs[1:]
    span = recs[-1]["time"] - recs[0]["time"]
    gen = [r["actors/tokens_per_s"] for r in records
           if "actors/tokens_per_s" in r and recs[0]["time"] <= r["time"] <= recs[-1]["time"]]
    return {
        "samples_per_s": sum(r["learner/episodes"] for r in later) / span,
        "update_s": statistics.mean(r["learner/update_time_s"] - r["learner/data_wait_s"]
                                    for r in later),
        "idle": sum(r["learner/data_wait_s"] for r in later)
        / sum(r["learner/update_time_s"] for r in later),
        "computed": sum(r["learner/tokens_computed"] for r in later)
        / sum(r["learner/tokens_flat"] for r in later),
        "gen_tok_s": statistics.mean(gen) if gen else float("nan"),
        "zero_adv": statistics.mean(r.get("learner/zero_advantage_frac", float("nan"))
                                    for r in later),
    }


def run_pairs(title: str, config: str, sides: dict[str, list[str]], updates: int,
              repeats: int, run_root: Path, extra: list[str],
              json_out: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """`repeats` pairs of launches, one per side (`sides`: name -> overrides, two of them), the
    order alternating; prints each launch and the summary, and writes every row to
    `json_out`."""
    if len(sides) != 2:
        raise ValueError(f"two sides, got {list(sides)}")
    (first, _), (second, _) = sides.items()
    print(f"## {title}: {Path(config).name} launches, evaluations off, {updates} updates each, "
          f"updates 2–{updates} timed; {load_line()}", flush=True)
    res: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    logs = run_root / "logs"
    for i in range(repeats):
        order = list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]
        for name, overrides in order:
            stamp = time.strftime("%H%M%S")
            row = one_launch(config, [*extra, *overrides], updates,
                             logs / f"{name}-{i + 1}-{stamp}.log", run_root)
            row["load"] = load_line()
            res[name].append(row)
            print(f"pair {i + 1} {name}: {row['samples_per_s']:.3f} samples/s, update "
                  f"{row['update_s']:.2f} s, learner idle {row['idle']:.1%}, generated "
                  f"{row['gen_tok_s']:.1f} tok/s, tokens computed {row['computed']:.3f} of flat, "
                  f"rows of advantage 0 {row['zero_adv']:.1%}"
                  f"{' (cold: trained the warm start)' if row['cold'] else ''}; {row['load']}",
                  flush=True)
            if json_out is not None:
                json_out.parent.mkdir(parents=True, exist_ok=True)
                json_out.write_text(json.dumps({"sides": sides, "rows": res}, indent=1))
    for key, label in METRICS:
        for name, rows in res.items():
            print(f"{label}, {name}: {fmt_ci([r[key] for r in rows], 3)}")
        ratios = [b[key] / a[key] for a, b in zip(res[first], res[second], strict=True)]
        m, half = mean_ci(ratios)
        interval = (f"95 % interval [{m - half:.3f}, {m + half:.3f}]" if len(ratios) > 1
                    else "one pair: no interval")
        print(f"{label} {second} / {first}: {fmt_ci(ratios, 3)}; {interval}")
    print(f"# done; {load_line()}")
    return res


def pairs_main(description: str, title: str, sides: dict[str, list[str]],
               run_root_name: str) -> None:
    """A bench's command line: `--config` (the default launch's), `--updates`, `--repeats`,
    `--set`, `--run-root` (runs/RUN_ROOT_NAME), `--json`; then `run_pairs`."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3, help="pairs of launches")
    ap.add_argument("--set", action="append", default=[], help="extra config override a.b=v")
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / run_root_name)
    ap.add_argument("--json", type=Path, default=None, help="every launch's row, as JSON")
    args = ap.parse_args()
    run_pairs(title, args.config, sides, args.updates, args.repeats, args.run_root, args.set,
              args.json)

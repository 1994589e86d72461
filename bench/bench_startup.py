"""Start-up latency: seconds from the `launch` command to its first RL update, by phase.

    .venv/bin/python -m bench.bench_startup                 # default config, 3 launches, ~4 min
    .venv/bin/python -m bench.bench_startup --repeats 1 --set engine.dtype=float32 --set learner.bf16=false

Each repeat runs `agent-r1-async launch` (configs/default.yaml, or `--config`) with the held-out
evaluations off (`eval.in_launch=false`) and `learner.total_updates=1`, so what is timed is the
path a user waits through before learning starts: Python and imports, preflight, the warm-start
cache check, Ray, the buffer, learner and actor processes (model load, vLLM engine start), and
the first batch of episodes and its update. The warm start must be cached (the first repeat
trains it if not; that repeat is marked "cold" and left out of the summary).

Phase ends come from RUN_DIR/startup.json (run/output/startup.py: wall-clock marks the launch writes)
minus the moment this bench started the command; the first update's own `data_wait_s` (the
learner waiting for the first batch) and `update_time_s` come from metrics.jsonl. Prints each
launch, then the median (min–max) of each phase over the warm repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.stats import fmt_spread

ROOT = Path(__file__).resolve().parents[1]

PHASES = ("preflight", "warm start", "ray", "processes", "first update")


def one_launch(config: str, overrides: list[str], run_root: Path) -> dict[str, float]:
    cmd = [str(ROOT / ".venv" / "bin" / "agent-r1-async"), "launch", "--config", config,
           "--set", "eval.in_launch=false", "--set", "learner.total_updates=1",
           "--set", f"launch.run_root={run_root}"]
    for o in overrides:
        cmd += ["--set", o]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    total = time.time() - t0
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(f"launch failed ({out.returncode})")
    run_dir = Path(out.stdout.split("run directory: ")[-1].strip())
    marks = json.loads((run_dir / "startup.json").read_text())
    row = {name: t - t0 for name, t in marks["phases"]}
    first = next(json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                 if '"learner/update_time_s"' in line)
    row["first batch wait"] = first["learner/data_wait_s"]
    row["first update"] = row.get("first update", float("nan"))
    row["whole command"] = total
    row["cold"] = float("warm start: training" in out.stdout)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench-startup")
    args = ap.parse_args()
    cols = (*PHASES, "first batch wait", "whole command")
    print(f"## Start-up: {Path(args.config).name} {' '.join(args.overrides)}; seconds since the "
          f"command (evaluations off, 1 update); {os.cpu_count()} cores")
    print(f"{'launch':8} " + " ".join(f"{c:>16}" for c in cols))
    rows = []
    for i in range(args.repeats):
        row = one_launch(args.config, args.overrides, args.run_root)
        rows.append(row)
        tag = f"{i + 1}{' cold' if row['cold'] else ''}"
        print(f"{tag:8} " + " ".join(f"{row.get(c, float('nan')):16.1f}" for c in cols), flush=True)
    warm = [r for r in rows if not r["cold"]] or rows
    print(f"median (min–max) over {len(warm)} warm launch(es), load {os.getloadavg()[0]:.1f}:")
    for c in cols:
        print(f"  {c:18} {fmt_spread([r[c] for r in warm], 1, ' s')}")


if __name__ == "__main__":
    main()

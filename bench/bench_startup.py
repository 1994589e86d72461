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

`--as-a-user` times launches as a newcomer runs them instead: evaluations on, the default
`learner.total_updates`, and each repeat a pair in a cache of its own
(`$AGENT_R1_ASYNC_CACHE`, empty at first): a **first launch** (it converts the model, measures
precision, trains the warm start and evaluates it) and a **second launch** (everything cached,
the before-RL evaluation included). Each launch is stopped with SIGINT (a graceful stop) once
`--updates` updates are logged, so the after-RL evaluation does not run. Phases add
"evaluation before"; the first launch's warm-start steps and its learner updates after the
first give the SFT-vs-learner speed row: training-sequence tokens (padding aside, before any
shared-prefix saving: `sft/tokens`, `learner/tokens_flat`) per second of step time (the
learner's without its wait for data). `--out DIR` keeps each launch's console, metrics.jsonl
and startup.json.

    .venv/bin/python -m bench.bench_startup --as-a-user --repeats 3 --out bench/results/startup/DATE
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_r1_async.run.output.metrics_file import read_records
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


USER_PHASES = ("preflight", "warm start", "evaluation before", "ray", "processes", "first update")


def _records(path: Path) -> list[dict]:
    return read_records(path) if path.is_file() else []


def user_launch(config: str, overrides: list[str], run_root: Path, cache: Path, updates: int,
                keep: Path | None, name: str) -> dict[str, float]:
    """One launch as a user runs it (evaluations on), in cache `cache`, stopped with SIGINT
    once `updates` updates are logged; its phases in seconds since the command."""
    cmd = [str(ROOT / ".venv" / "bin" / "agent-r1-async"), "launch", "--config", config,
           "--set", f"launch.run_root={run_root}"]
    for o in overrides:
        cmd += ["--set", o]
    env = {**os.environ, "AGENT_R1_ASYNC_CACHE": str(cache)}
    run_root.mkdir(parents=True, exist_ok=True)
    log = run_root / f"{name}.console.txt"
    t0 = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True)
        run_dir: Path | None = None
        stop_at = None
        while proc.poll() is None:
            time.sleep(1.0)
            text = log.read_text() if run_dir is None else ""
            if "run directory: " in text:
                run_dir = Path(text.split("run directory: ")[1].split("\n")[0].strip())
            if run_dir is None or stop_at is not None:
                if stop_at is not None and time.time() - stop_at > 180:
                    proc.send_signal(signal.SIGINT)  # a second interrupt: exit now
                    stop_at = time.time()
                continue
            done = [r for r in _records(run_dir / "metrics.jsonl") if "learner/update_time_s" in r]
            if len(done) >= updates:
                stop_at = time.time()
                proc.send_signal(signal.SIGINT)
        proc.wait()
    if run_dir is None or not (run_dir / "startup.json").is_file():
        sys.stderr.write(log.read_text()[-3000:])
        raise SystemExit(f"{name}: launch failed ({proc.returncode})")
    marks = json.loads((run_dir / "startup.json").read_text())
    row = {phase: t - t0 for phase, t in marks["phases"]}
    recs = _records(run_dir / "metrics.jsonl")
    upd = [r for r in recs if "learner/update_time_s" in r]
    trained = sorted(cache.glob("warm-start/*/metrics.jsonl"),
                     key=lambda f: f.stat().st_mtime)  # the warm start this launch trained
    sft = [r for r in _records(trained[-1]) if "sft/tokens" in r] if trained and \
        "warm start: training" in log.read_text() else []
    if len(upd) < updates:
        sys.stderr.write(log.read_text()[-3000:])
        raise SystemExit(f"{name}: {len(upd)} of {updates} updates before the launch ended")
    row["first batch wait"] = upd[0]["learner/data_wait_s"]
    row["stopped"] = (stop_at or time.time()) - t0
    row["cold"] = float(bool(sft))
    if sft:
        row["sft tok/s"] = (sum(r["sft/tokens"] for r in sft)
                            / sum(r["sft/step_time_s"] for r in sft))
    later = upd[1:]
    if later:
        row["learner tok/s"] = (sum(r["learner/tokens_flat"] for r in later)
                                / sum(r["learner/update_time_s"] - r["learner/data_wait_s"]
                                      for r in later))
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, keep / f"{name}.console.txt")
        for f in ("metrics.jsonl", "startup.json"):
            shutil.copy(run_dir / f, keep / f"{name}.{f}")
        if sft:
            shutil.copy(trained[-1], keep / f"{name}.warm-start.metrics.jsonl")
    return row


def as_a_user(args: argparse.Namespace) -> None:
    cols = (*USER_PHASES, "first batch wait")
    print(f"## Start-up as a user runs it: {Path(args.config).name} {' '.join(args.overrides)}; "
          f"seconds since the command (evaluations on; each pair in an empty cache; stopped "
          f"after {args.updates} updates); {os.cpu_count()} cores", flush=True)
    print(f"{'launch':9} " + " ".join(f"{c:>17}" for c in cols))
    rows: dict[str, list[dict[str, float]]] = {"first": [], "second": []}
    for i in range(args.repeats):
        cache = args.run_root / f"cache-{i + 1}"
        shutil.rmtree(cache, ignore_errors=True)
        for kind in ("first", "second"):
            row = user_launch(args.config, args.overrides, args.run_root, cache, args.updates,
                              args.out, f"{kind}-{i + 1}")
            rows[kind].append(row)
            print(f"{kind + ' ' + str(i + 1):9} "
                  + " ".join(f"{row.get(c, float('nan')):17.1f}" for c in cols), flush=True)
            if kind == "first":
                print(f"          warm start {row.get('sft tok/s', float('nan')):.0f} tok/s, "
                      f"learner {row.get('learner tok/s', float('nan')):.0f} tok/s "
                      f"(updates 2–{args.updates})", flush=True)
        shutil.rmtree(cache, ignore_errors=True)
    print(f"median (min–max), load {os.getloadavg()[0]:.1f}:")
    for kind, kind_rows in rows.items():
        print(f"  {kind} launch ({len(kind_rows)}):")
        for c in cols:
            print(f"    {c:18} {fmt_spread([r.get(c, float('nan')) for r in kind_rows], 1, ' s')}")
    firsts = [r for r in rows["first"] if "sft tok/s" in r and "learner tok/s" in r]
    if firsts:
        print("  warm start vs learner, training-sequence tokens per second of step time:")
        print(f"    warm start {fmt_spread([r['sft tok/s'] for r in firsts], 0)}, learner "
              f"{fmt_spread([r['learner tok/s'] for r in firsts], 0)}, ratio "
              f"{fmt_spread([r['sft tok/s'] / r['learner tok/s'] for r in firsts], 2, 'x')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench-startup")
    ap.add_argument("--as-a-user", action="store_true",
                    help="evaluations on, first and second launch in an empty cache (docstring)")
    ap.add_argument("--updates", type=int, default=3,
                    help="--as-a-user: stop each launch after this many updates")
    ap.add_argument("--out", type=Path, default=None,
                    help="--as-a-user: keep each launch's console and metrics here")
    args = ap.parse_args()
    if args.as_a_user:
        as_a_user(args)
        return
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

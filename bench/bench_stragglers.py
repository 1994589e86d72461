"""Stragglers in real launches: the `world` env on a heavy-tailed mix of horizons, one launch
per `buffer.max_staleness`, from one warm start.

    .venv/bin/python -m bench.bench_stragglers --minutes 30 --json bench/results/stragglers/DATE/results.json

Each launch is `agent-r1-async launch --config CONFIG` with the held-out evaluations off, the
world's presets drawn from `--mix` (each task ends after its own preset's turn budget: 24 /
64 / 128 actions for short / medium / long), `buffer.max_staleness` = k, and
`launch.max_wall_time_s` = `--minutes`. The warm start is trained (or found cached) before the
first launch, so every launch starts from the same policy and spends its minutes on RL.

Per launch, from its metrics.jsonl:
- steady state (bench/launch_pairs.py `steady_state`, updates 2..): episodes trained per
  second, the learner's idle share, update time, generated tokens per second;
- the buffer's length ledger at the last update (buffers/lengths.py): episodes generated and
  their length buckets at the 50th and 99th percentiles, the mean length of trained over
  generated episodes, groups dropped for staleness, and per length bucket the fraction of the
  generated steps that were trained (an episode still in flight at the end is not generated
  yet; one sampled again counts once) and the share of the generated episodes dropped stale
  (a generated step neither trained nor dropped was still waiting in the buffer when the
  launch stopped).

The simulated counterpart (more hours, no engine) is bench_staleness_bias.py.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.lengths import bucket_of
from agent_r1_async.run.output.metrics_file import read_records
from bench.cli_runs import cli, run_logged, sets
from bench.launch_pairs import steady_state
from bench.stats import load_line

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MIX = "{short: 0.75, medium: 0.15, long: 0.1}"
"""Task shares: an untrained policy's episodes run to their budgets, 24 / 64 / 128 actions, so
generated lengths have p50 in the 32 bucket and p99 in the 128 one; a trained one's follow
the optimal plans (medians 6 / 20 / 40)."""
LONG_CONTEXT = ["env.max_turns=128", "model.max_model_len=8192",
                "learner.micro_batch_tokens=8192", "engine.kv_cache_gb=6"]
"""128 turns of ~60 tokens after a ~470-token instruction fit 8,192 tokens; the learner takes
one such episode per micro-batch."""


def _bucket_counts(record: dict[str, Any], prefix: str) -> dict[int, float]:
    """{b: value} of the record's `<prefix>/le_<b>` keys."""
    return {b: v for k, v in record.items()
            if k.rpartition("/")[0] == prefix and (b := bucket_of(k)) is not None}


def _quantile_bucket(counts: dict[int, float], q: float) -> int:
    """The length bucket holding the q-quantile of the episodes counted in `counts`."""
    total = sum(counts.values())
    seen = 0.0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= q * total:
            return bucket
    raise ValueError("no episodes")


def lengths(record: dict[str, Any]) -> dict[str, Any]:
    """What the buffer's ledger in one metrics record says of generated and trained lengths
    (module docstring)."""
    generated = _bucket_counts(record, "episodes/generated")
    if not sum(generated.values()):
        raise ValueError("no generated episodes in the record")
    gen_steps = _bucket_counts(record, "episodes/generated_steps")
    trained_steps = _bucket_counts(record, "episodes/trained_steps")
    stale = _bucket_counts(record, "buffer/drops_by_len/stale")
    return {
        "generated": sum(generated.values()),
        "p50_bucket": _quantile_bucket(generated, 0.5),
        "p99_bucket": _quantile_bucket(generated, 0.99),
        "trained_length_ratio": record.get("episodes/trained_length_ratio", float("nan")),
        "stale_groups": record.get("buffer/drops/stale", 0.0),
        "trained_step_fraction": {b: trained_steps.get(b, 0.0) / s
                                  for b, s in sorted(gen_steps.items()) if s},
        "stale_episode_fraction": {b: stale.get(b, 0.0) / n
                                   for b, n in sorted(generated.items()) if n},
    }


NO_STEADY_STATE = {"samples_per_s": math.nan, "update_s": math.nan, "idle": math.nan,
                   "computed": math.nan, "gen_tok_s": math.nan}


def launch_row(run_dir: Path) -> dict[str, Any]:
    """One finished launch's row, from its metrics.jsonl: the steady state over updates 2..
    (nan with fewer than 2 updates: a synchronous launch of long episodes may fit one in
    its minutes) and the length ledger at its last update."""
    records = list(read_records(run_dir / "metrics.jsonl"))
    ledger = [r for r in records if "episodes/trained_length_ratio" in r]
    if not ledger:
        raise SystemExit(f"{run_dir}: no update logged the length ledger")
    updates = sum("learner/update_time_s" in r for r in records)
    steady = steady_state(records, min_updates=2) if updates >= 2 else NO_STEADY_STATE
    return {**steady, **lengths(ledger[-1]), "run_dir": str(run_dir), "updates": updates}


def one_launch(config: str, overrides: list[str], log: Path) -> dict[str, Any]:
    out = run_logged(cli("launch", "--config", config, *sets(overrides)), log)
    return launch_row(Path(out.split("run directory: ")[-1].strip()))


def _warm(config: str, overrides: list[str]) -> None:
    """Train (or find) the launches' shared warm start before the first one is timed."""
    from agent_r1_async.config import load_config
    from agent_r1_async.run.warm_start import is_cached, warm_start

    cfg = load_config(config, overrides)
    if cfg.launch.warm_start and not cfg.model.init_from and not is_cached(cfg):
        t0 = time.monotonic()
        warm_start(cfg, print)
        print(f"warm start trained in {time.monotonic() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/world.yaml")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--minutes", type=float, default=30.0, help="wall time of each launch")
    ap.add_argument("--mix", default=DEFAULT_MIX, help="env.args.mix, as YAML")
    ap.add_argument("--set", action="append", default=[], help="extra config override a.b=v")
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench-stragglers")
    ap.add_argument("--json", type=Path, default=None, help="every launch's row, as JSON")
    ap.add_argument("--done", action="append", default=[], metavar="K=RUN_DIR",
                    help="max_staleness K's launch already ran (this command's, stopped "
                         "after it): its row is read from RUN_DIR instead of launching again")
    args = ap.parse_args()
    done = {int(k): Path(d) for k, d in (x.split("=", 1) for x in args.done)}
    common = [*LONG_CONTEXT, f"env.args.mix={args.mix}", "eval.in_launch=false",
              "learner.total_updates=100000", f"launch.max_wall_time_s={args.minutes * 60:.0f}",
              f"launch.run_root={args.run_root}", *args.set]
    print(f"## stragglers: {Path(args.config).name}, mix {args.mix}, {args.minutes:g} min per "
          f"launch, max_staleness {args.staleness}; {load_line()}", flush=True)
    _warm(args.config, common)
    rows: dict[str, dict[str, Any]] = {}
    for k in args.staleness:
        stamp = time.strftime("%H%M%S")
        if k in done:
            row = launch_row(done[k])
            row["load"] = "(an earlier launch of this command)"
        else:
            row = one_launch(args.config, [*common, f"buffer.max_staleness={k}"],
                             args.run_root / "logs" / f"staleness-{k}-{stamp}.log")
            row["load"] = load_line()
        rows[str(k)] = row
        frac = ", ".join(f"le_{b} {f:.2f}" for b, f in row["trained_step_fraction"].items())
        stale = ", ".join(f"le_{b} {f:.2f}" for b, f in row["stale_episode_fraction"].items())
        print(f"max_staleness {k}: {row['updates']} updates, {row['samples_per_s']:.4f} "
              f"episodes/s, learner idle {row['idle']:.1%}, update {row['update_s']:.0f} s, "
              f"generated {row['gen_tok_s']:.1f} tok/s; {row['generated']:.0f} episodes "
              f"generated, length p50 ≤ {row['p50_bucket']}, p99 ≤ {row['p99_bucket']}; "
              f"trained/generated mean length {row['trained_length_ratio']:.3f}, "
              f"{row['stale_groups']:.0f} groups dropped stale; trained share of generated "
              f"steps: {frac}; dropped stale, share of generated episodes: {stale}; "
              f"{row['load']}", flush=True)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"mix": args.mix, "minutes": args.minutes,
                                             "config": args.config, "rows": rows}, indent=1))
    print(f"# done; {load_line()}")


if __name__ == "__main__":
    main()

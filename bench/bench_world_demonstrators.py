"""The world's two demonstrators side by side: episode lengths of the planner (optimal, sees the
whole world) and the explorer (acts on what the agent has read), per horizon preset.

    .venv/bin/python -m bench.bench_world_demonstrators
    .venv/bin/python -m bench.bench_world_demonstrators --worlds 500 --json out.json

For the first `--worlds` train worlds of each preset (the `world` env's train split with its
default arguments, as a warm start draws its demonstrations): the planner's plan length (d(s_0))
and the explorer's, their median, p90 and max, the explorer ÷ planner ratio per world, the share
of worlds where the explorer walks the optimal plan, and the share its episode fits in the
preset's suggested `env.max_turns` (and in `--max-turns`, configs/world.yaml's). Lengths are a
function of the worlds only: the same on any machine. Seconds to run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import cast

from agent_r1_async.envs.world.args import HORIZONS, SUGGESTED_MAX_TURNS, Horizon, WorldArgs
from agent_r1_async.envs.world.explorer import explore
from agent_r1_async.envs.world.planner import plan
from agent_r1_async.envs.world.state import initial_state
from agent_r1_async.envs.world.tasks import make_tasks
from agent_r1_async.learner.episode_stats import percentile
from bench.stats import utc_date


def measure(horizon: str, worlds: int, max_turns: int) -> dict[str, float]:
    args = WorldArgs(horizon=cast(Horizon, horizon), num_train=worlds, num_dev=0, num_test=0)
    planner, explorer, stuck = [], [], 0
    t0 = time.perf_counter()
    for task in make_tasks(args, "train"):
        layout = task.meta["layout"]
        optimal = plan(layout, initial_state(layout))
        walked = explore(layout)
        assert optimal is not None
        if walked is None:
            stuck += 1
            continue
        planner.append(len(optimal))
        explorer.append(len(walked))
    ratios = [e / p for e, p in zip(explorer, planner, strict=True)]
    limit = SUGGESTED_MAX_TURNS[horizon]
    return {
        "worlds": len(planner) + stuck, "stuck": stuck,
        "planner_median": statistics.median(planner), "planner_p90": percentile(planner, 90),
        "planner_max": max(planner),
        "explorer_median": statistics.median(explorer), "explorer_p90": percentile(explorer, 90),
        "explorer_max": max(explorer),
        "ratio_median": statistics.median(ratios), "ratio_max": max(ratios),
        "optimal_share": sum(e == p for e, p in zip(explorer, planner, strict=True))
        / len(planner),
        "suggested_max_turns": limit,
        "fits_suggested": sum(e <= limit for e in explorer) / len(explorer),
        "max_turns": max_turns,
        "fits_max_turns": sum(e <= max_turns for e in explorer) / len(explorer),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, default=500)
    ap.add_argument("--max-turns", type=int, default=56,
                    help="a turn budget to check the explorer against (configs/world.yaml's)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print(f"## world demonstrators: first {args.worlds} train worlds per preset; {utc_date()}")
    print("| horizon | planner median / p90 / max | explorer median / p90 / max | explorer ÷ "
          "planner median (max) | explorer optimal | fits suggested max_turns | fits "
          f"{args.max_turns} | stuck |")
    print("|---|---|---|---|---|---|---|---|")
    rows = {}
    for horizon in HORIZONS:
        r = rows[horizon] = measure(horizon, args.worlds, args.max_turns)
        print(f"| `{horizon}` | {r['planner_median']:g} / {r['planner_p90']:g} / "
              f"{r['planner_max']} | {r['explorer_median']:g} / {r['explorer_p90']:g} / "
              f"{r['explorer_max']} | {r['ratio_median']:.2f} ({r['ratio_max']:.2f}) | "
              f"{r['optimal_share']:.0%} | {r['fits_suggested']:.0%} of "
              f"{r['suggested_max_turns']} | {r['fits_max_turns']:.0%} | {r['stuck']} |",
              flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""eval.every_updates under `launch` (tiny config): eval/periodic/* records at the right
versions, and the learner's update rate with and without the evaluation actor (printed, not
asserted on time: the 2-core machine is shared).

Right versions (run/processes/periodic_eval.py): the first result is version 0, each next one is at or
past the next multiple of every_updates after the previous, none past the last update, and
the record's `update` is the version it evaluated.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_r1_async.run.processes.periodic_eval import next_due
from tests.integration.cli_runs import cli_env
from tests.integration.test_launch import _records

ROOT = Path(__file__).resolve().parents[2]
UPDATES, EVERY = 8, 2


def _run(tmp_path: Path, *sets: str) -> Path:
    out = subprocess.run(
        [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
         str(ROOT / "configs/tiny.yaml"), "--set", f"launch.run_root={tmp_path}",
         "--set", f"learner.total_updates={UPDATES}", "--set", "learner.checkpoint_every=8",
         *[a for s in sets for a in ("--set", s)]],
        capture_output=True, text=True, timeout=420, env=cli_env(), cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return Path(out.stdout.split("[launch] run directory: ")[-1].strip())


def _update_rate(rows: list[dict]) -> tuple[float, float]:
    """(updates/s between the first and the last update record, that span in s)."""
    ups = [r for r in rows if "learner/loss" in r]
    span = ups[-1]["time"] - ups[0]["time"]
    return (len(ups) - 1) / span, span


@pytest.mark.slow
def test_periodic_eval_versions_and_learner_rate(tmp_path: Path):
    base = _run(tmp_path / "off")
    load_off = os.getloadavg()[0]  # the machine is shared: other work moves the rates
    run = _run(tmp_path / "on", f"eval.every_updates={EVERY}", "eval.every_num_tasks=8")
    load_on = os.getloadavg()[0]
    rows = _records(run)
    evals = [r for r in rows if "eval/periodic/version" in r]
    versions = [int(r["eval/periodic/version"]) for r in evals]
    assert versions and versions[0] == 0, versions
    for prev, v in itertools.pairwise(versions):
        assert v >= next_due(prev, EVERY), versions
    assert versions[-1] <= UPDATES
    for r in evals:
        assert r["update"] == r["eval/periodic/version"]
        assert r["eval/periodic/episodes"] == 8.0
        for key in ("eval/periodic/success", "eval/periodic/outcome_reward",
                    "eval/periodic/eval_time_s", "eval/periodic/eval_cpu_s",
                    "eval/periodic/hacking_no_tool_score"):
            assert key in r, key
    updates = [r for r in rows if "learner/loss" in r]
    assert [r["update"] for r in updates] == list(range(1, UPDATES + 1))
    for r in updates:  # the canaries reach metrics.jsonl per update (counts and rates)
        for name in ("no_tool_score", "verbatim_copy"):
            count, rate = r[f"hacking/{name}"], r[f"hacking/{name}_rate"]
            assert count >= 0 and 0 <= rate <= 1 and (count == 0) == (rate == 0)
    assert (run / "plots" / "reward.png").stat().st_size > 1000

    rate_off, _ = _update_rate(_records(base))
    rate_on, span = _update_rate(rows)
    in_span = [r for r in evals if r["time"] <= max(x["time"] for x in rows if "learner/loss" in x)]
    share = sum(r["eval/periodic/eval_cpu_s"] for r in in_span) / (span * (os.cpu_count() or 1))
    print(f"\nlearner updates/s without evaluation {rate_off:.3f}, with {rate_on:.3f} "
          f"(drop {1 - rate_on / rate_off:+.1%}); evaluation's CPU share of the machine while "
          f"the learner ran {share:.1%}; evaluated versions {versions}; 1-min load average "
          f"after each run {load_off:.1f} / {load_on:.1f} on {os.cpu_count()} cores")

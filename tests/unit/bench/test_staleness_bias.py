"""The staleness-bias simulation, on a schedule small enough to derive by hand."""

from __future__ import annotations

import argparse
import random
from collections import Counter

from bench import bench_staleness_bias as sim


def _args(**kw: object) -> argparse.Namespace:
    base = dict(mix="1:5-5", length_sd=0.0, max_turns=100, actors=1, groups_in_flight=1,
                group_size=2, batch_groups=1, step_s=1.0, update_s=10.0, action_tokens=3,
                poll_s=1.0, sim_s=60.0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_a_synchronous_schedule_by_hand() -> None:
    """One group of two 5-step episodes at a time, max_staleness 0: a group is granted at
    t = 0, its steps land at t = 1..5, the learner trains it from t = 5 to 15 (version 1), the
    next group is granted at t = 15 and trained at 20, ... Updates end at 15, 30, 45, 60: 4
    in 60 s. Idle: 0-5, 15-20, 30-35, 45-50 = 20 s (33.3 %). 4 groups x 2 episodes trained:
    8 episodes a minute, every one of 5 steps, every token of the version that trains it."""
    args = _args()
    cfg, algo = sim.build([], 0, args)
    r = sim.simulate(cfg, algo, args, seed=0)
    assert r["updates"] == 4
    assert abs(r["idle_pct"] - 100 * 20 / 60) < 1e-9
    assert r["episodes_per_min"] == 8.0
    assert r["generated_mean"] == r["trained_mean"] == 5.0 and r["length_ratio"] == 1.0
    assert r["trained_fraction"] == {"le_8": 1.0}
    assert r["token_staleness"] == {"p50": 0.0, "p99": 0.0, "max": 0}
    assert "stale" not in r["drops"]


def test_mix_parsing_and_lengths() -> None:
    mix = sim.parse_mix("3:4-10,1:60-100")
    assert mix == [(0.75, 4, 10), (0.25, 60, 100)]
    rng = random.Random(0)
    lengths = sim.draw_lengths(rng, [(1.0, 7, 7)], 4, sd=0.0, max_turns=100)
    assert lengths == [7, 7, 7, 7]
    assert sim.draw_lengths(rng, [(1.0, 200, 200)], 2, sd=0.0, max_turns=100) == [100, 100]
    assert sim.bucketed(Counter({3: 2, 4: 1, 5: 1, 100: 1}), 100) == Counter({4: 3, 8: 1, 128: 1})

"""Steps of advantage 0 left out of the learner's pass, end to end: whole launches with
`learner.skip_zero_advantage` false (every step computed) against true (the default).

    .venv/bin/python -m bench.bench_zero_skip --repeats 3 --json bench/results/zero_skip/DATE/results.json

Alternating pairs of launches (bench/launch_pairs.py: evaluations off, `--updates` updates,
updates 2.. timed): samples/s, update time, learner idle, generated tokens/s and the share of
the flat tokens the learner computed, per launch, and the per-pair ratio skip / compute with
its 95 % t interval. A step of advantage 0 carries no gradient (GRPO without KL or entropy), so
both sides train the same weights for the same batches; what differs is the compute, in
proportion to the share of steps whose group's returns are all equal.
"""

from __future__ import annotations

from bench.launch_pairs import pairs_main


def main() -> None:
    pairs_main(__doc__.splitlines()[0], "steps of advantage 0 left out, end to end",
               {"compute": ["learner.skip_zero_advantage=false"],
                "skip": ["learner.skip_zero_advantage=true"]},
               "bench-zero-skip")


if __name__ == "__main__":
    main()

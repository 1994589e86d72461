"""vLLM's busy-wait between its engine core and worker, end to end: whole default launches with
`engine.ipc_busy_wait_s` 1 (vLLM's own window: the engine core spins on a core for as long as
the worker computes; the default) against 0 (it parks on a ZeroMQ notification).

    .venv/bin/python -m bench.bench_busy_wait --repeats 3 --json bench/results/busy_wait/DATE/results.json

Alternating pairs of launches (bench/launch_pairs.py: evaluations off, `--updates` updates,
updates 2.. timed): samples/s, update time, learner idle and generated tokens/s per launch, and
the per-pair ratio park / spin with its 95 % t interval. On a 2-core machine the worker's
OpenMP thread holds one core and the learner, the actor's event loop, the buffer and the
engine core share the other, so a spinning engine core takes CPU time from the learner.
"""

from __future__ import annotations

from bench.launch_pairs import pairs_main


def main() -> None:
    pairs_main(__doc__.splitlines()[0], "vLLM busy-wait end to end",
               {"spin": ["engine.ipc_busy_wait_s=1"], "park": ["engine.ipc_busy_wait_s=0"]},
               "bench-busy-wait")


if __name__ == "__main__":
    main()

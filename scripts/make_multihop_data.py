"""Regenerate the shipped synthetic multi-hop QA data (agent_r1_async/data/multihop/).

    python scripts/make_multihop_data.py [--seed 1234] [--out DIR]

The generator is deterministic; tests/unit/envs/multihop/test_multihop.py checks the shipped files equal
a fresh generation.
"""

from __future__ import annotations

import argparse

from agent_r1_async.envs.multihop.env import SHIPPED_DIR
from agent_r1_async.envs.multihop.generator import DEFAULT_SEED, write_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", default=str(SHIPPED_DIR))
    args = ap.parse_args()
    counts = write_dataset(args.out, args.seed)
    print(f"wrote {args.out}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()

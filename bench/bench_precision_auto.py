"""What `engine.dtype: auto` and `learner.bf16: auto` decide on this machine, and what the
decision costs: `precision.describe` as the launch driver calls it (torch and vLLM not imported,
each probe in a spawned child) with an empty verdict cache, then again from the cache, then each
probe measured three times in this process.

    .venv/bin/python -m bench.bench_precision_auto

The verdicts go to a temporary `$AGENT_R1_ASYNC_CACHE` (the machine's own cache is neither read
nor written); the file it wrote is printed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

MODEL = "smollm2-135m-instruct"


def main() -> None:
    cache = tempfile.mkdtemp(prefix="precision-auto-")
    os.environ["AGENT_R1_ASYNC_CACHE"] = cache  # before any import reads it
    t0 = time.perf_counter()
    from agent_r1_async import precision
    from agent_r1_async.config import EngineConfig, LearnerConfig

    print(f"## precision.describe(EngineConfig(), LearnerConfig(device='auto'), model={MODEL!r}),"
          " timed from the import; empty cache, then cached")
    for _ in range(2):
        line = precision.describe(EngineConfig(), LearnerConfig(device="auto"), model=MODEL)
        print(f"{time.perf_counter() - t0:.2f} s: {line}")
        print(f"  torch imported in this process: {'torch' in sys.modules}, "
              f"vllm: {'vllm' in sys.modules}", flush=True)
        t0 = time.perf_counter()
    print("## the verdict cache it wrote")
    for path in sorted(Path(cache).glob("*.json")):
        print(path.read_text())
    from agent_r1_async.bf16.probe import Probe, measure_noted

    print("## each probe in this process (its library imported), 3 times")
    for op in ("torch", "vllm"):
        probe = Probe.for_model(op, MODEL, 1)
        for _ in range(3):
            t = time.perf_counter()
            fp32_s, bf16_s, note = measure_noted(probe)
            print(f"{op:5} {probe.tokens}x{probe.hidden}x{probe.intermediate}: fp32 "
                  f"{fp32_s * 1e3:.2f} ms, bf16 {bf16_s * 1e3:.2f} ms per run (best), bf16 "
                  f"{fp32_s / bf16_s:.2f}x fp32, {time.perf_counter() - t:.3f} s"
                  + (f" ({note})" if note else ""), flush=True)


if __name__ == "__main__":
    main()

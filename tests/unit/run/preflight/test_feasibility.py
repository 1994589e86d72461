"""The feasibility preflight's refusals of weights.backend vllm_nccl (run/preflight/feasibility.py),
with this machine's CUDA device count injected: no GPU needed."""

from __future__ import annotations

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import feasibility
from agent_r1_async.run.preflight.feasibility import check_feasible

INSTEAD = ("use weights.backend zmq (a colocated CUDA-IPC weight path, learner and engine on "
           "one GPU, is not built)")
SAME_DEVICE = ("weights.backend: vllm_nccl would put the learner and the engine on this "
               "machine's only CUDA device, and NCCL cannot run two ranks of one group on one "
               f"device: {INSTEAD}")


def _cfg(*overrides: str) -> RunConfig:
    return config_from_dict({}, ["engine.backend=vllm", "launch.run_root=/tmp", *overrides])


@pytest.fixture
def devices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Set `devices[0]` to the CUDA device count the preflight sees."""
    count = [0]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(feasibility, "_cuda_devices", lambda: count[0])
    return count


@pytest.mark.parametrize("gpus", [
    ["learner.num_gpus=0.5", "actors.num_gpus=0.5"],  # both reserve a share of the one GPU
    ["learner.num_gpus=1", "actors.num_gpus=0"],  # the engine sits on the learner's GPU
    ["learner.num_gpus=0", "actors.num_gpus=1"],
])
def test_nccl_weights_on_a_one_gpu_machine_are_refused_naming_zmq(
    devices: list[int], gpus: list[str]
) -> None:
    devices[0] = 1
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_nccl", *gpus))
    assert str(info.value) == SAME_DEVICE
    assert "\n" not in str(info.value)


def test_nccl_weights_on_a_machine_without_cuda_are_refused(devices: list[int]) -> None:
    devices[0] = 0
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_nccl"))
    assert str(info.value) == (
        "weights.backend: vllm_nccl sends over NCCL between CUDA devices; this machine has "
        f"none (torch.cuda.device_count()): {INSTEAD}")


@pytest.mark.parametrize(("key", "gpus"), [
    ("learner.num_gpus", ["learner.num_gpus=0", "actors.num_gpus=1"]),
    ("actors.num_gpus", ["learner.num_gpus=1", "actors.num_gpus=0"]),
])
def test_nccl_weights_need_a_gpu_reserved_on_each_side(
    devices: list[int], key: str, gpus: list[str]
) -> None:
    devices[0] = 2
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_nccl", *gpus))
    assert str(info.value) == (
        f"{key}: weights.backend vllm_nccl needs a GPU reserved for the learner and for each "
        "engine (NCCL, one rank per device); with 0 the process sits on cuda:0, which Ray may "
        f"give another: set {key} (e.g. 1), or {INSTEAD}")


def test_nccl_weights_with_a_gpu_each_pass(devices: list[int]) -> None:
    devices[0] = 2
    check_feasible(_cfg("weights.backend=vllm_nccl", "learner.num_gpus=1", "actors.num_gpus=1"))


def test_a_cluster_run_is_not_judged_by_this_machines_gpus(
    devices: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_probe() -> int:
        raise AssertionError("a cluster run must not count this machine's CUDA devices")

    monkeypatch.setattr(feasibility, "_cuda_devices", no_probe)
    check_feasible(_cfg("weights.backend=vllm_nccl", "learner.num_gpus=1", "actors.num_gpus=1"),
                   address="auto")
    with pytest.raises(ConfigError, match=r"^actors\.num_gpus: "):  # the config alone tells
        check_feasible(_cfg("weights.backend=vllm_nccl", "learner.num_gpus=1"), address="auto")


@pytest.mark.parametrize("backend", ["vllm_gloo", "zmq"])
def test_other_weight_backends_share_the_one_gpu(devices: list[int], backend: str) -> None:
    devices[0] = 1
    check_feasible(_cfg(f"weights.backend={backend}", "learner.num_gpus=0.5",
                        "actors.num_gpus=0.5"))

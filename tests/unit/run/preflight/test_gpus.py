"""GPU and weight-backend refusals of the launch preflight (run/preflight/gpus.py):
weights.backend vllm_nccl and vllm_ipc, with this machine's CUDA device count injected (no GPU
needed)."""

from __future__ import annotations

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import gpus
from agent_r1_async.run.preflight.feasibility import check_feasible

INSTEAD = "use weights.backend vllm_ipc (CUDA IPC: the learner and the engines on one GPU)"
ON_CPU = "use weights.backend zmq or vllm_gloo on CPU"
IPC_INSTEAD = "use weights.backend vllm_nccl across GPUs"
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
    monkeypatch.setattr(gpus, "_cuda_devices", lambda: count[0])
    return count


@pytest.mark.parametrize("gpus", [
    ["learner.num_gpus=0.5", "actors.num_gpus=0.5"],  # both reserve a share of the one GPU
    ["learner.num_gpus=1", "actors.num_gpus=0"],  # the engine sits on the learner's GPU
    ["learner.num_gpus=0", "actors.num_gpus=1"],
])
def test_nccl_weights_on_a_one_gpu_machine_are_refused_naming_vllm_ipc(
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
        f"none (torch.cuda.device_count()): {ON_CPU}")


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

    monkeypatch.setattr(gpus, "_cuda_devices", no_probe)
    check_feasible(_cfg("weights.backend=vllm_nccl", "learner.num_gpus=1", "actors.num_gpus=1"),
                   address="auto")
    with pytest.raises(ConfigError, match=r"^actors\.num_gpus: "):  # the config alone tells
        check_feasible(_cfg("weights.backend=vllm_nccl", "learner.num_gpus=1"), address="auto")


@pytest.mark.parametrize("backend", ["vllm_gloo", "zmq"])
def test_other_weight_backends_share_the_one_gpu(devices: list[int], backend: str) -> None:
    devices[0] = 1
    check_feasible(_cfg(f"weights.backend={backend}", "learner.num_gpus=0.5",
                        "actors.num_gpus=0.5"))


def test_ipc_weights_on_a_machine_without_cuda_are_refused(devices: list[int]) -> None:
    devices[0] = 0
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc"))
    assert str(info.value) == (
        "weights.backend: vllm_ipc shares CUDA memory between the learner and the engine; this "
        f"machine has no CUDA device (torch.cuda.device_count()): {ON_CPU}")


def test_ipc_weights_with_the_learner_on_the_cpu_are_refused(devices: list[int]) -> None:
    devices[0] = 1
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc", "learner.device=cpu"))
    assert str(info.value) == (
        "learner.device: weights.backend vllm_ipc hands the engine CUDA IPC handles of the "
        "learner's CUDA tensors, and learner.device is cpu: set learner.device cuda:0 (or "
        f"auto), or {ON_CPU}")


@pytest.mark.parametrize(("key", "gpus", "shown"), [
    ("learner.num_gpus", ["learner.num_gpus=1", "actors.num_gpus=1"],
     "(1) and actors.num_gpus (1)"),
    ("learner.num_gpus", ["learner.num_gpus=1", "actors.num_gpus=0.5"],
     "(1) and actors.num_gpus (0.5)"),
    ("actors.num_gpus", ["learner.num_gpus=0.5", "actors.num_gpus=2"],
     "(0.5) and actors.num_gpus (2)"),
])
def test_ipc_weights_on_whole_gpus_of_their_own_are_refused_naming_vllm_nccl(
    devices: list[int], key: str, gpus: list[str], shown: str
) -> None:
    """A whole GPU Ray reserves is that process's alone: the other side's share is elsewhere.
    Judged from the config alone (a cluster: this machine's GPUs are not counted)."""
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc", *gpus), address="auto")
    assert str(info.value) == (
        f"{key}: weights.backend vllm_ipc needs the learner and each engine on one GPU; "
        f"learner.num_gpus {shown} put them on different GPUs (Ray gives a whole GPU to one "
        f"process alone): reserve a share of one GPU each (e.g. 0.5 and 0.5), or {IPC_INSTEAD}")


def test_ipc_weights_with_shares_on_a_two_gpu_machine_are_refused(devices: list[int]) -> None:
    devices[0] = 2
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc", "learner.num_gpus=0.5",
                            "actors.num_gpus=0.5"))
    assert str(info.value) == (
        "weights.backend: vllm_ipc needs the learner and each engine on one GPU; this machine "
        "has 2, and Ray may place learner.num_gpus (0.5) and actors.num_gpus (0.5) on different "
        f"ones: set both to 0 (every process then sits on cuda:0), or {IPC_INSTEAD}")


def test_ipc_weights_with_the_learner_off_the_engines_cuda_0_are_refused(
    devices: list[int],
) -> None:
    devices[0] = 2
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc", "learner.device=cuda:1"))
    assert str(info.value) == (
        "learner.device: 'cuda:1' with weights.backend vllm_ipc: with learner.num_gpus and "
        "actors.num_gpus 0 every process sees every GPU and the engine sits on cuda:0, the "
        f"learner on cuda:1: set learner.device cuda:0, or {IPC_INSTEAD}")


def test_ipc_weights_joining_a_cluster_are_refused(
    devices: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_probe() -> int:
        raise AssertionError("a cluster run must not count this machine's CUDA devices")

    monkeypatch.setattr(gpus, "_cuda_devices", no_probe)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("weights.backend=vllm_ipc", "learner.num_gpus=0.5",
                            "actors.num_gpus=0.5"), address="auto")
    assert str(info.value) == (
        "weights.backend: vllm_ipc opens the learner's GPU memory in the engine, on one "
        "machine; joining a cluster (--address, launch.address or RAY_ADDRESS), Ray may place "
        f"the learner and an engine on different nodes: {IPC_INSTEAD}")


@pytest.mark.parametrize(("have", "settings"), [
    (1, ["learner.num_gpus=0.5", "actors.num_gpus=0.5", "learner.device=cuda:0"]),  # gpu_1x
    (1, ["learner.num_gpus=0", "actors.num_gpus=0"]),
    (1, ["learner.num_gpus=1", "actors.num_gpus=0"]),  # the engine sees the learner's GPU
    (1, ["learner.num_gpus=0", "actors.num_gpus=1", "learner.device=cuda"]),
    (2, ["learner.num_gpus=0", "actors.num_gpus=0", "learner.device=cuda:0"]),
    (8, ["learner.num_gpus=0", "actors.num_gpus=0"]),
])
def test_ipc_weights_where_learner_and_engine_share_a_gpu_pass(
    devices: list[int], have: int, settings: list[str]
) -> None:
    devices[0] = have
    check_feasible(_cfg("weights.backend=vllm_ipc", *settings))

"""The feasibility preflight's refusals (run/preflight/feasibility.py): weights.backend
vllm_nccl and vllm_ipc, with this machine's CUDA device count injected (no GPU needed); a bind
host this machine cannot bind; a run root no file can be written in; `--resume` of a directory
without a checkpoint."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import feasibility
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
    monkeypatch.setattr(feasibility, "_cuda_devices", lambda: count[0])
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

    monkeypatch.setattr(feasibility, "_cuda_devices", no_probe)
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


BIND_HINT = "use an address of one of this machine's interfaces, e.g. 127.0.0.1"
NOT_A_ZMQ_HOST = ("No such device: ZeroMQ binds an IPv4 address, an interface name, localhost "
                  "or *, not a host name or an IPv6 address")


@pytest.mark.parametrize(("host", "reason"), [
    ("203.0.113.9", "Cannot assign requested address"),  # TEST-NET-3: no interface has it
    ("not a host", NOT_A_ZMQ_HOST),
    ("::1", NOT_A_ZMQ_HOST),  # the run's ZeroMQ sockets do not enable IPv6
])
def test_a_bind_host_this_machine_cannot_bind_is_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, host: str, reason: str
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(f"launch.bind_host={host}"))
    assert str(info.value) == (
        f"launch.bind_host: cannot bind {host!r} on this machine ({reason}); {BIND_HINT}")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0.0.0.0", "'*'", "lo"])
def test_hosts_zeromq_binds_here_pass(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_feasible(_cfg(f"launch.bind_host={host}"))


def test_a_joined_cluster_checks_the_bind_hosts_form_not_this_machine() -> None:
    """With --address the buffer may run on a node that has 203.0.113.9: not bound here; a
    host no node can bind (a space in it) is still refused."""
    feasibility.bind_host_bindable("203.0.113.9", joined=True)
    feasibility.bind_host_bindable("eth0", joined=True)
    check_feasible(_cfg("launch.bind_host=203.0.113.9"), address="auto")
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("launch.bind_host=not a host"), address="auto")
    assert str(info.value) == (
        "launch.bind_host: 'not a host' cannot be bound on any node: ZeroMQ binds an IPv4 "
        "address, an interface name, localhost or * (not a DNS name nor, here, IPv6); 0.0.0.0 "
        "binds every interface")


def test_a_run_root_under_proc_is_refused_with_the_os_reason(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("launch.run_root=/proc/runs"))
    message = str(info.value)
    # root: procfs has no such entry to make; anyone else: /proc is not theirs to write
    reason = "No such file or directory" if os.geteuid() == 0 else "Permission denied"
    assert message == (f"launch.run_root: cannot write in '/proc/runs': {reason}; choose a "
                       "writable directory")
    assert not Path("/proc/runs").exists()


def test_a_full_run_root_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The probe writes a file: a full disk (here: its write fails with ENOSPC) refuses."""
    def full(directory: Path) -> None:
        assert directory == tmp_path / "runs"  # made for the probe ...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(feasibility, "_write_probe", full)
    with pytest.raises(ConfigError) as info:
        feasibility.run_root_writable(str(tmp_path / "runs"))
    assert str(info.value) == (f"launch.run_root: cannot write in '{tmp_path / 'runs'}': No "
                               "space left on device; choose a writable directory")
    assert list(tmp_path.iterdir()) == []  # ... and removed after it


def test_a_writable_run_root_passes_and_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "old.txt").write_text("x")
    feasibility.run_root_writable(str(tmp_path / "new" / "runs"))
    feasibility.run_root_writable(str(tmp_path / "kept"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept", "old.txt"]


def test_a_read_only_run_root_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes in a 0555 directory")
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(ConfigError, match=r"^launch\.run_root: cannot write in .*: Permission "
                                          r"denied; choose a writable directory$"):
        feasibility.run_root_writable(str(tmp_path / "ro" / "runs"))


def _run_dir(tmp_path: Path, *entries: str) -> Path:
    run = tmp_path / "tiny-20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    for name in entries:
        (run / "checkpoints" / name).mkdir()
    return run


def test_resume_without_a_checkpoint_is_refused_unless_fresh(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(), resume=str(run))
    assert str(info.value) == (
        f"--resume: {run} has no checkpoint to resume from (checkpoints/ is empty); pass "
        "--fresh to train it from scratch in that directory")
    check_feasible(_cfg(), resume=str(run), fresh=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]


def test_resume_names_what_checkpoints_holds_when_nothing_is_complete(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, ".tmp-step-2-abc", "step-1")  # step-1 has no learner_state.json
    with pytest.raises(ConfigError) as info:
        feasibility.resume_has_checkpoint(str(run), fresh=False)
    assert str(info.value) == (
        f"--resume: {run} has no checkpoint to resume from (checkpoints/ holds no intact "
        f"checkpoint: step-1: {run}/checkpoints/step-1/manifest.json: missing (and no "
        "learner_state.json: not a checkpoint)); pass --fresh to train it from scratch in that "
        "directory")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ConfigError, match=r"\(no checkpoints/ directory\)"):
        feasibility.resume_has_checkpoint(str(bare), fresh=False)


def test_resume_with_a_checkpoint_passes_and_fresh_is_refused_there(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "step-2", "step-2/dcp")  # a checkpoint as written before manifests
    (run / "checkpoints" / "step-2" / "learner_state.json").write_text('{"version": 2}')
    check_feasible(_cfg(), resume=str(run))
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(), resume=str(run), fresh=True)
    assert str(info.value) == (
        f"--fresh: {run} has a checkpoint (step-2) and would resume from it, not start from "
        "scratch: drop --fresh to resume it, or start a new run without --resume")


def _ray_node(ip: str, alive: bool = True, **resources: float) -> dict:
    return {"NodeManagerAddress": ip, "Alive": alive,
            "Resources": {"memory": 1e9, f"node:{ip}": 1.0, **resources}}


_THREE = [_ray_node("127.0.0.2", CPU=1, buffer=1), _ray_node("127.0.0.3", CPU=2, learner=1, actor=1),
          _ray_node("127.0.0.4", CPU=1, actor=1)]
_PLACED = {"launch": {"bind_host": "node"}, "buffer": {"resources": {"buffer": 1}},
           "learner": {"resources": {"learner": 1}}, "actors": {"resources": {"actor": 1}}}


def test_a_cluster_whose_nodes_hold_each_roles_resources_fits() -> None:
    feasibility.cluster_fits(config_from_dict(_PLACED), _THREE)


def test_a_role_no_live_node_can_host_is_refused_naming_its_key_and_the_nodes() -> None:
    nodes = [*_THREE[:2], _ray_node("127.0.0.4", alive=False, CPU=1, actor=1)]
    cfg = config_from_dict({**_PLACED, "actors": {"resources": {"actor": 2}}})
    with pytest.raises(ConfigError) as e:
        feasibility.cluster_fits(cfg, nodes)
    assert str(e.value) == (
        "actors.resources: no live node of this cluster has {CPU: 1, actor: 2} for one process "
        "({actor: 2} from this key); nodes: 127.0.0.2: {CPU: 1, buffer: 1}; "
        "127.0.0.3: {CPU: 2, actor: 1, learner: 1}")


def test_a_resource_no_node_advertises_is_refused() -> None:
    cfg = config_from_dict({**_PLACED, "buffer": {"resources": {"bufer": 1}}})
    with pytest.raises(ConfigError, match=r"^buffer\.resources: no live node of this cluster "
                                          r"has \{CPU: 0\.5, bufer: 1\}"):
        feasibility.cluster_fits(cfg, _THREE)


def test_loopback_sockets_on_a_cluster_of_several_nodes_are_refused() -> None:
    cfg = config_from_dict({k: v for k, v in _PLACED.items() if k != "launch"})
    with pytest.raises(ConfigError) as e:
        feasibility.cluster_fits(cfg, _THREE)
    assert str(e.value) == (
        "launch.bind_host: '127.0.0.1' is reachable only from its own node, and this cluster "
        "has 3: use node (each process binds its own node's address) or 0.0.0.0")
    one_live = [_ray_node("127.0.0.2", CPU=4, buffer=1, learner=1, actor=1),
                _ray_node("127.0.0.3", alive=False)]
    feasibility.cluster_fits(cfg, one_live)  # one live node: loopback reaches every process


@pytest.mark.parametrize("key", ["buffer", "learner", "actors"])
@pytest.mark.parametrize(("resources", "why"), [
    ({"CPU": 1}, r"'CPU' is not a custom resource name"),
    ({"gpu_node": 0}, r"gpu_node: 0\.0 must be a positive amount"),
    ({"gpu_node": -1}, r"gpu_node: -1\.0 must be a positive amount")])
def test_a_roles_resources_must_be_custom_and_positive(key, resources, why) -> None:
    with pytest.raises(ValueError, match=rf"^{key}\.resources: {why}"):
        config_from_dict({key: {"resources": resources}})


def test_learner_compile_needs_a_cpp_compiler_on_path(monkeypatch, tmp_path):
    cfg = config_from_dict({"learner": {"compile": True}})
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no compiler at all
    with pytest.raises(ConfigError) as e:
        feasibility.compiler_present(cfg)
    assert str(e.value).startswith("learner.compile: inductor builds the learner's kernels")
    assert "(g++ c++ clang++)" in str(e.value) and "learner.compile false" in str(e.value)
    fake = tmp_path / "clang++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    feasibility.compiler_present(cfg)  # any one of them will do
    monkeypatch.setenv("CXX", "my-cxx")  # $CXX is the only one inductor then tries
    with pytest.raises(ConfigError, match=r"none is on PATH \(my-cxx\)"):
        feasibility.compiler_present(cfg)
    feasibility.compiler_present(config_from_dict({}))  # off: nothing checked


def test_a_micro_batch_budget_below_the_longest_sequence_is_refused_naming_the_keys() -> None:
    # 100 steps of a `full` context packed into one sequence: up to model.max_model_len tokens,
    # one micro-batch of its own whatever the budget.
    long = ["env.max_turns=100", "model.max_model_len=8192", "engine.max_new_tokens=48"]
    with pytest.raises(ConfigError) as e:
        check_feasible(_cfg(*long, "learner.micro_batch_tokens=4096"))
    why = str(e.value)
    assert why.startswith("learner.micro_batch_tokens: (4096) is below model.max_model_len "
                          "(8192), the longest sequence the learner may train")
    for key in ("engine.max_new_tokens 48", "env.max_turns (100)", "context.max_tokens",
                "set learner.micro_batch_tokens to at least 8192",
                "or model.max_model_len to at most 4096"):
        assert key in why, key
    assert "\n" not in why
    feasibility.sequences_fit_micro_batch(_cfg(*long, "learner.micro_batch_tokens=8192"))
    feasibility.sequences_fit_micro_batch(  # the budget, not the episode, was the trouble
        _cfg("env.max_turns=100", "model.max_model_len=4096", "learner.micro_batch_tokens=4096"))

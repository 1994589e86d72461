"""GPUs a local run reserves, and the weight backends that need CUDA devices (`vllm_nccl`,
`vllm_ipc`): checks `launch` makes before Ray starts (feasibility.py).

- the GPUs the processes reserve and `learner.device` must exist on this machine (a local run);
- `weights.backend: vllm_nccl` needs the learner and each engine on CUDA devices of their own
  (one NCCL rank each): refused where the config or this machine puts two on one device
  (`vllm_ipc` is named instead);
- `weights.backend: vllm_ipc` needs the learner and each engine on one GPU of one machine
  (CUDA IPC): refused without CUDA, with the learner on the CPU, or where the config or this
  machine may put them on different GPUs or nodes (`vllm_nccl` is named instead).
"""

from __future__ import annotations

from agent_r1_async.config import ConfigError, RunConfig


def _cuda_devices() -> int:
    import torch  # only when the config asks for a GPU

    return torch.cuda.device_count()


def gpus_fit(cfg: RunConfig) -> None:
    lc, ac = cfg.learner, cfg.actors
    want = lc.world_size * lc.num_gpus + ac.num_actors * ac.num_gpus
    index = -1
    if lc.device.startswith("cuda"):
        index = int(lc.device.partition(":")[2] or 0)
    if want == 0 and index < 0:
        return
    have = _cuda_devices()
    if index >= have:
        raise ConfigError(
            f"learner.device: {lc.device!r} needs {index + 1} CUDA device(s); this machine has "
            f"{have} (torch.cuda.device_count()): use cpu or auto")
    if want > have:
        key = "learner.num_gpus" if lc.num_gpus else "actors.num_gpus"
        raise ConfigError(
            f"{key}: the processes reserve learner.world_size × learner.num_gpus + "
            f"actors.num_actors × actors.num_gpus = {want:g} GPUs; this machine has {have}: "
            "Ray would never place them all")


_NCCL_INSTEAD = ("use weights.backend vllm_ipc (CUDA IPC: the learner and the engines on one "
                 "GPU)")
_ON_CPU = "use weights.backend zmq or vllm_gloo on CPU"
_IPC_INSTEAD = "use weights.backend vllm_nccl across GPUs"


def nccl_weights_reserve_gpus(cfg: RunConfig) -> None:
    """weights.backend vllm_nccl puts the learner (rank 0) and one engine (rank 1) in each NCCL
    group, and NCCL needs each rank on a device of its own. Ray leaves every GPU visible to a
    process that reserves none (CUDA_VISIBLE_DEVICES untouched), so such a learner or engine
    sits on cuda:0, a device Ray may give another: both must reserve GPUs (any cluster)."""
    if cfg.weights.backend != "vllm_nccl":
        return
    for key, gpus in (("learner.num_gpus", cfg.learner.num_gpus),
                      ("actors.num_gpus", cfg.actors.num_gpus)):
        if gpus == 0:
            raise ConfigError(
                f"{key}: weights.backend vllm_nccl needs a GPU reserved for the learner and for "
                "each engine (NCCL, one rank per device); with 0 the process sits on cuda:0, "
                f"which Ray may give another: set {key} (e.g. 1), or {_NCCL_INSTEAD}")


def nccl_weights_fit(cfg: RunConfig) -> None:
    """A local run with weights.backend vllm_nccl: a machine with no CUDA device has nothing to
    send from; one with exactly one puts the learner and the engine on that device, which NCCL
    refuses (two ranks of one group on one device). With two or more, Ray's placement of
    fractional `num_gpus` is not known before it starts and is not checked here."""
    if cfg.weights.backend != "vllm_nccl":
        return
    have = _cuda_devices()
    if have == 0:
        raise ConfigError(
            "weights.backend: vllm_nccl sends over NCCL between CUDA devices; this machine has "
            f"none (torch.cuda.device_count()): {_ON_CPU}")
    if have == 1:
        raise ConfigError(
            "weights.backend: vllm_nccl would put the learner and the engine on this machine's "
            "only CUDA device, and NCCL cannot run two ranks of one group on one device: "
            f"{_NCCL_INSTEAD}")


def ipc_weights_colocated(cfg: RunConfig, joined: bool) -> None:
    """weights.backend vllm_ipc hands each engine CUDA IPC handles of the learner's CUDA
    tensors, which open only on the same physical GPU of the same machine. Refused wherever the
    config alone says they cannot share one: the learner on the CPU; GPUs reserved whole on
    one side and any on the other (Ray gives a whole GPU to one process: the other's share is
    on another GPU); both reserving none (every process sees every GPU, the engine sits on
    cuda:0) with the learner on another index; a cluster, whose nodes Ray chooses."""
    if cfg.weights.backend != "vllm_ipc":
        return
    lc, ac = cfg.learner, cfg.actors
    if lc.device == "cpu":
        raise ConfigError(
            "learner.device: weights.backend vllm_ipc hands the engine CUDA IPC handles of the "
            "learner's CUDA tensors, and learner.device is cpu: set learner.device cuda:0 (or "
            f"auto), or {_ON_CPU}")
    if lc.num_gpus > 0 and ac.num_gpus > 0 and max(lc.num_gpus, ac.num_gpus) >= 1:
        key = "learner.num_gpus" if lc.num_gpus >= 1 else "actors.num_gpus"
        raise ConfigError(
            f"{key}: weights.backend vllm_ipc needs the learner and each engine on one GPU; "
            f"learner.num_gpus ({lc.num_gpus:g}) and actors.num_gpus ({ac.num_gpus:g}) put them "
            "on different GPUs (Ray gives a whole GPU to one process alone): reserve a share "
            f"of one GPU each (e.g. 0.5 and 0.5), or {_IPC_INSTEAD}")
    index = int(lc.device.partition(":")[2] or 0) if lc.device.startswith("cuda") else 0
    if lc.num_gpus == 0 and ac.num_gpus == 0 and index != 0:
        raise ConfigError(
            f"learner.device: {lc.device!r} with weights.backend vllm_ipc: with "
            "learner.num_gpus and actors.num_gpus 0 every process sees every GPU and the engine "
            f"sits on cuda:0, the learner on cuda:{index}: set learner.device cuda:0, or "
            f"{_IPC_INSTEAD}")
    if joined:
        raise ConfigError(
            "weights.backend: vllm_ipc opens the learner's GPU memory in the engine, on one "
            "machine; joining a cluster (--address, launch.address or RAY_ADDRESS), Ray may "
            f"place the learner and an engine on different nodes: {_IPC_INSTEAD}")


def ipc_weights_fit(cfg: RunConfig) -> None:
    """A local run with weights.backend vllm_ipc: a machine without CUDA has no IPC to share;
    with exactly one CUDA device every process is on it; with more, Ray's placement of GPU
    reservations is not known before it starts, so only a config that reserves none (every
    process on cuda:0, `ipc_weights_colocated`) is sure to share one GPU."""
    if cfg.weights.backend != "vllm_ipc":
        return
    have = _cuda_devices()
    if have == 0:
        raise ConfigError(
            "weights.backend: vllm_ipc shares CUDA memory between the learner and the engine; "
            f"this machine has no CUDA device (torch.cuda.device_count()): {_ON_CPU}")
    lc, ac = cfg.learner, cfg.actors
    if have > 1 and (lc.num_gpus > 0 or ac.num_gpus > 0):
        raise ConfigError(
            f"weights.backend: vllm_ipc needs the learner and each engine on one GPU; this "
            f"machine has {have}, and Ray may place learner.num_gpus ({lc.num_gpus:g}) and "
            f"actors.num_gpus ({ac.num_gpus:g}) on different ones: set both to 0 (every "
            f"process then sits on cuda:0), or {_IPC_INSTEAD}")

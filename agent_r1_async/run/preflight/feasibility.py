"""Can this config run at all? Checks `launch` makes before Ray starts (after the config
loaded, which already validated every key on its own and against its section).

Each one catches a config that would otherwise hang with no message or fail late with a
traceback, and raises a one-line `ConfigError` naming the key and what would fit:

- the batch must fit in the buffer: `batch_groups` groups of `group_size` worst-case episodes
  within `buffer.max_bytes`, or the buffer stops granting credits before a batch is complete
  and the learner waits for it forever;
- a local run (embedded Ray: this machine is the whole cluster) must fit this machine:
  `launch.num_cpus` ≥ the CPUs the processes reserve (Ray would never place the rest), the
  GPUs they reserve and `learner.device` exist, `buffer.max_bytes` ≤ its memory (memory.py);
- `launch.run_root` must be a writable directory (or creatable in one);
- `weights.backend: vllm_nccl` needs the learner and each engine on CUDA devices of their own
  (one NCCL rank each): refused where the config or this machine puts two on one device.

On a cluster (`--address`) the nodes' resources are not known before Ray starts, so only the
machine-independent checks run.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from agent_r1_async.buffers.assembly import max_episode_nbytes
from agent_r1_async.config import ConfigError, RunConfig
from agent_r1_async.run.preflight.memory import buffer_fits_memory
from agent_r1_async.run.processes.ray_cluster import _cpus_needed, ray_address

_GIB = 1 << 30


def check_feasible(cfg: RunConfig, address: str | None = None, resume: str | None = None) -> None:
    """Raise a ConfigError if `launch` could not run `cfg` (joining `address`, resuming `resume`)."""
    batch_fits_buffer(cfg)
    if ray_address(cfg, address) is None:
        cpus_fit(cfg)
        gpus_fit(cfg)
        nccl_weights_fit(cfg)
        buffer_fits_memory(cfg)
    nccl_weights_reserve_gpus(cfg)
    if not resume:
        run_root_writable(cfg.launch.run_root)


def batch_fits_buffer(cfg: RunConfig) -> None:
    groups = max(cfg.algorithm.batch_groups, cfg.buffer.min_groups_to_sample)
    episode = max_episode_nbytes(cfg.env.max_turns, cfg.model.max_model_len,
                                 cfg.engine.max_new_tokens)
    group = cfg.algorithm.group_size * episode
    if groups * group <= cfg.buffer.max_bytes:
        return
    key = ("algorithm.batch_groups" if groups == cfg.algorithm.batch_groups
           else "buffer.min_groups_to_sample")
    raise ConfigError(
        f"{key}: ({groups}) groups of algorithm.group_size ({cfg.algorithm.group_size}) episodes "
        f"can take {groups * group / _GIB:.3g} GiB in the buffer (env.max_turns "
        f"{cfg.env.max_turns} steps of up to model.max_model_len {cfg.model.max_model_len} "
        f"tokens, {episode} B an episode), more than buffer.max_bytes "
        f"({cfg.buffer.max_bytes / _GIB:.3g} GiB): the buffer would stop granting credits "
        f"before a batch is complete; at most {cfg.buffer.max_bytes // group} groups fit "
        "(or raise buffer.max_bytes)")


def cpus_fit(cfg: RunConfig) -> None:
    """An explicit `launch.num_cpus` below what the processes reserve leaves some of them
    unplaced, and Ray waits for them without a word (0 = enough logical CPUs for all)."""
    need = math.ceil(_cpus_needed(cfg))
    if cfg.launch.num_cpus == 0 or cfg.launch.num_cpus >= need:
        return
    lc, ac = cfg.learner, cfg.actors
    raise ConfigError(
        f"launch.num_cpus: ({cfg.launch.num_cpus}) is fewer than the run's processes reserve: "
        f"learner.world_size × learner.num_cpus ({lc.world_size} × {lc.num_cpus:g}) + "
        f"actors.num_actors × actors.num_cpus ({ac.num_actors} × {ac.num_cpus:g}) + 0.5 (buffer) "
        f"= {_cpus_needed(cfg):g}; Ray would never place them all: set at least {need} "
        "(or 0 for enough)")


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


_NCCL_INSTEAD = ("use weights.backend zmq (a colocated CUDA-IPC weight path, learner and engine "
                 "on one GPU, is not built)")


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
            f"none (torch.cuda.device_count()): {_NCCL_INSTEAD}")
    if have == 1:
        raise ConfigError(
            "weights.backend: vllm_nccl would put the learner and the engine on this machine's "
            "only CUDA device, and NCCL cannot run two ranks of one group on one device: "
            f"{_NCCL_INSTEAD}")


def run_root_writable(run_root: str) -> None:
    """The run directory is made under `run_root` (parents created): the nearest existing
    ancestor must be a directory this process may write."""
    path = Path(run_root)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"launch.run_root: {run_root!r} cannot be made: {str(existing)!r} is "
                          "a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"launch.run_root: {run_root!r} cannot be made: {str(existing)!r} is "
                          "not writable")

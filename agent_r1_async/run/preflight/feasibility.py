"""Can this config run at all? Checks `launch` makes before Ray starts (after the config
loaded, which already validated every key on its own and against its section).

Each one catches a config that would otherwise hang with no message or fail late with a
traceback, and raises a one-line `ConfigError` naming the key and what would fit:

- the batch must fit in the buffer: `batch_groups` groups of `group_size` worst-case episodes
  within `buffer.max_bytes`, or the buffer stops granting credits before a batch is complete
  and the learner waits for it forever;
- the longest sequence the learner may train (`model.max_model_len`: a step, or an episode
  packed into one sequence) must fit `learner.micro_batch_tokens`, or its micro-batch holds
  more tokens, and activation memory, than the budget and the memory preflight allow
  (`sequences_fit_micro_batch`);
- `learner.compile` needs a C++ compiler (`compiler_present`);
- a local run (embedded Ray: this machine is the whole cluster) must fit this machine:
  `launch.num_cpus` ≥ the CPUs the processes reserve (Ray would never place the rest), the
  GPUs they reserve and `learner.device` exist (gpus.py), `buffer.max_bytes` ≤ its memory
  (memory.py);
- the weight backends on CUDA devices: `vllm_nccl` a device per rank, `vllm_ipc` one GPU
  shared (gpus.py);
- `launch.bind_host` must be an address the run's ZeroMQ sockets can bind (bind_host.py);
- `launch.run_root` must be a directory a file can be written in (or creatable in one), and a
  resumed run's directory too; `--resume RUN_DIR` needs a checkpoint in RUN_DIR, unless
  `--fresh` says to train that directory from scratch (directories.py).

On a cluster (`--address`) the nodes' resources are not known before Ray starts, so only the
machine-independent checks run (for `launch.bind_host`: its form, not a bind on this machine);
once Ray is up, `cluster_fits` checks the cluster's nodes: each role's resources on some node,
and a bind host every node can reach.
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Any

from agent_r1_async.buffers.assembly import max_episode_nbytes
from agent_r1_async.config import LOOPBACK_HOSTS, ConfigError, RunConfig
from agent_r1_async.run.preflight.bind_host import bind_host_bindable
from agent_r1_async.run.preflight.directories import (
    dir_writable,
    resume_has_checkpoint,
    run_root_writable,
)
from agent_r1_async.run.preflight.gpus import (
    gpus_fit,
    ipc_weights_colocated,
    ipc_weights_fit,
    nccl_weights_fit,
    nccl_weights_reserve_gpus,
)
from agent_r1_async.run.preflight.memory import buffer_fits_memory, longest_sequence
from agent_r1_async.run.processes.ray_cluster import BUFFER_NUM_CPUS, _cpus_needed, ray_address

_GIB = 1 << 30


def check_feasible(cfg: RunConfig, address: str | None = None, resume: str | None = None,
                   fresh: bool = False) -> None:
    """Raise a ConfigError if `launch` could not run `cfg` (joining `address`, resuming
    `resume`; `fresh`: the resumed directory may have no checkpoint)."""
    if resume:
        resume_has_checkpoint(resume, fresh)
    batch_fits_buffer(cfg)
    sequences_fit_micro_batch(cfg)
    compiler_present(cfg)
    joined = ray_address(cfg, address) is not None
    if not joined:
        cpus_fit(cfg)
        gpus_fit(cfg)
        nccl_weights_fit(cfg)
        ipc_weights_fit(cfg)
        buffer_fits_memory(cfg)
    nccl_weights_reserve_gpus(cfg)
    ipc_weights_colocated(cfg, joined)
    bind_host_bindable(cfg.launch.bind_host, joined)
    if resume:
        dir_writable(resume, "--resume")
    else:
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


def sequences_fit_micro_batch(cfg: RunConfig) -> None:
    """A micro-batch holds whole sequences (learner/batching.py): one longer than
    `learner.micro_batch_tokens` would get a micro-batch of its own, over the budget that bounds
    the learner's activation memory. Splitting it at step boundaries would not help: a piece
    ending at step t still holds step t's whole context. So the budget must hold the longest
    sequence, `model.max_model_len` (memory.py `longest_sequence`)."""
    lc, longest = cfg.learner, longest_sequence(cfg)
    if lc.micro_batch_tokens >= longest:
        return
    raise ConfigError(
        f"learner.micro_batch_tokens: ({lc.micro_batch_tokens}) is below model.max_model_len "
        f"({longest}), the longest sequence the learner may train: a step's context + action "
        f"(engine.max_new_tokens {cfg.engine.max_new_tokens}) reaches it, and so does an "
        f"episode of up to env.max_turns ({cfg.env.max_turns}) steps packed into one sequence "
        f"(learner.pack_steps); a sequence is never split across micro-batches, so its "
        f"micro-batch would exceed the budget and the memory preflight's estimate: set "
        f"learner.micro_batch_tokens to at least {longest}, or model.max_model_len to at most "
        f"{lc.micro_batch_tokens} (episodes end there: fewer env.max_turns, or context.builder "
        f"truncate with context.max_tokens + engine.max_new_tokens within it, keep them whole)")


def cpp_compilers() -> list[str]:
    """The C++ compilers inductor would try: $CXX alone when set, else g++, c++, clang++."""
    return [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]


def compiler_present(cfg: RunConfig) -> None:
    """`learner.compile`: inductor builds C++ kernels on a CPU (and Triton's launchers on a GPU)
    with the machine's compiler; without one it fails only inside the learner's first update."""
    if not cfg.learner.compile:
        return
    names = cpp_compilers()
    if any(shutil.which(n) for n in names):
        return
    raise ConfigError(
        f"learner.compile: inductor builds the learner's kernels with a C++ compiler, and "
        f"none is on PATH ({' '.join(names)}): install g++ (Debian/Ubuntu: apt-get install g++) "
        "or set learner.compile false")


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


def cluster_fits(cfg: RunConfig, nodes: list[dict[str, Any]]) -> None:
    """Once Ray is up on a cluster (`nodes`: `ray.nodes()`): each role's custom resources are
    advertised by some live node (else its process would wait for placement for good), and
    with several nodes the sockets bind an address the other nodes reach."""
    alive = [n for n in nodes if n.get("Alive")]
    if len(alive) > 1 and cfg.launch.bind_host in LOOPBACK_HOSTS:
        raise ConfigError(
            f"launch.bind_host: {cfg.launch.bind_host!r} is reachable only from its own node, "
            f"and this cluster has {len(alive)}: use node (each process binds its own node's "
            "address) or 0.0.0.0")
    roles = (("buffer.resources", {"CPU": BUFFER_NUM_CPUS, **cfg.buffer.resources}),
             ("learner.resources", {"CPU": cfg.learner.num_cpus, "GPU": cfg.learner.num_gpus,
                                    **cfg.learner.resources}),
             ("actors.resources", {"CPU": cfg.actors.num_cpus, "GPU": cfg.actors.num_gpus,
                                   **cfg.actors.resources}))
    for key, need in roles:
        if any(all(n["Resources"].get(r, 0.0) >= a for r, a in need.items() if a > 0)
               for n in alive):
            continue
        custom = {r: a for r, a in need.items() if r not in ("CPU", "GPU")}
        shown = "; ".join(f"{n['NodeManagerAddress']}: {_resources(n['Resources'])}"
                          for n in alive)
        raise ConfigError(f"{key}: no live node of this cluster has {_resources(need)} for one "
                          f"process{' (' + _resources(custom) + ' from this key)' if custom else ''}; "
                          f"nodes: {shown}")


def _resources(resources: dict[str, float]) -> str:
    """CPU, GPU and custom resources, without Ray's per-node and memory entries."""
    shown = {r: a for r, a in resources.items()
             if a and not r.startswith("node:") and "memory" not in r}
    return "{" + ", ".join(f"{r}: {a:g}" for r, a in sorted(shown.items())) + "}"

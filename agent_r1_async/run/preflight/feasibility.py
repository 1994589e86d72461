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
- a local run (embedded Ray: this machine is the whole cluster) must fit this machine:
  `launch.num_cpus` ≥ the CPUs the processes reserve (Ray would never place the rest), the
  GPUs they reserve and `learner.device` exist, `buffer.max_bytes` ≤ its memory (memory.py);
- `launch.bind_host` must be an address the run's ZeroMQ sockets can bind (`bind_host_bindable`);
- `launch.run_root` must be a directory a file can be written in (or creatable in one), and a
  resumed run's directory too (`dir_writable`);
- `--resume RUN_DIR` needs a checkpoint in RUN_DIR, unless `--fresh` says to train that
  directory from scratch (`resume_has_checkpoint`);
- `weights.backend: vllm_nccl` needs the learner and each engine on CUDA devices of their own
  (one NCCL rank each): refused where the config or this machine puts two on one device
  (`vllm_ipc` is named instead);
- `weights.backend: vllm_ipc` needs the learner and each engine on one GPU of one machine
  (CUDA IPC): refused without CUDA, with the learner on the CPU, or where the config or this
  machine may put them on different GPUs or nodes (`vllm_nccl` is named instead).

On a cluster (`--address`) the nodes' resources are not known before Ray starts, so only the
machine-independent checks run (for `launch.bind_host`: its form, not a bind on this machine);
once Ray is up, `cluster_fits` checks the cluster's nodes: each role's resources on some node,
and a bind host every node can reach.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent_r1_async.buffers.assembly import max_episode_nbytes
from agent_r1_async.config import LOOPBACK_HOSTS, ConfigError, RunConfig
from agent_r1_async.learner.checkpoint_files import complete_checkpoints, step_dirs, verify
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


def run_root_writable(run_root: str) -> None:
    """The run directory is made under `run_root` (parents created): the nearest existing
    ancestor must be a directory, and a file must be writable where the run directory goes
    (`dir_writable`: a permission, a read-only or full filesystem, /proc, are all refused)."""
    existing = Path(run_root)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(f"launch.run_root: {run_root!r} cannot be made: {str(existing)!r} is "
                          "a file, not a directory")
    dir_writable(run_root, "launch.run_root")


def dir_writable(directory: str, key: str) -> None:
    """Make `directory` (and its missing parents), write a small file in it and remove it; a
    ConfigError naming `key` and the OS's reason when any step fails. Nothing is left behind:
    the probe file is removed and so are the directories this check made (the launch makes
    them again)."""
    path = Path(directory)
    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        _write_probe(path)
    except OSError as e:
        failed = Path(str(e.filename)) if e.filename else path
        where = f" (at {str(failed)!r})" if failed in path.parents else ""  # a parent's mkdir
        raise ConfigError(f"{key}: cannot write in {directory!r}{where}: {e.strerror or e}; "
                          "choose a writable directory") from None
    finally:
        for p in made:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()


def _write_probe(directory: Path) -> None:
    """Write a small file in `directory`, to its disk, and remove it."""
    fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
    try:
        os.write(fd, b"agent-r1-async write probe\n")
        os.fsync(fd)  # a full disk or quota shows here at the latest
    finally:
        os.close(fd)
        os.unlink(probe)


def resume_has_checkpoint(run_dir: str, fresh: bool) -> None:
    """`--resume RUN_DIR` continues from RUN_DIR's latest checkpoint; without one the learner
    would silently start at update 0. Refused, unless `--fresh` asks for exactly that; with
    `--fresh`, a directory that has a checkpoint is refused instead (it would resume, not
    start afresh). A complete checkpoint is a `step-N` directory with its learner state
    (learner/checkpoint_files.py, read without importing torch); `latest` names only those."""
    found = complete_checkpoints(Path(run_dir) / "checkpoints")
    if fresh and found:
        raise ConfigError(
            f"--fresh: {run_dir} has a checkpoint ({found[-1].name}) and would resume from it, "
            "not start from scratch: drop --fresh to resume it, or start a new run without "
            "--resume")
    if fresh or found:
        return
    raise ConfigError(f"--resume: {run_dir} has no checkpoint to resume from "
                      f"({_checkpoints_state(Path(run_dir) / 'checkpoints')}); pass --fresh to "
                      "train it from scratch in that directory")


def _checkpoints_state(root: Path) -> str:
    if not root.is_dir():
        return "no checkpoints/ directory"
    steps = step_dirs(root)[::-1]  # newest first, each with why it cannot be used
    if steps:
        shown = "; ".join(f"{p.name}: {verify(p, full=False).problem}" for p in steps[:3])
        return f"checkpoints/ holds no intact checkpoint: {shown}" + ("; ..." if len(steps) > 3 else "")
    names = sorted(p.name for p in root.iterdir())
    if not names:
        return "checkpoints/ is empty"
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"checkpoints/ holds no complete checkpoint: {shown}"


_ANY_HOST = ("*", "0.0.0.0")
_ZMQ_HOSTS = "an IPv4 address, an interface name, localhost or *"
_INTERFACE_NAME = re.compile(r"[^\s/:]{1,15}")  # Linux: at most 15 bytes, no space, '/' or ':'


def bind_host_bindable(host: str, joined: bool) -> None:
    """`launch.bind_host` is where the buffer and the learner bind their ZeroMQ sockets, in
    processes Ray starts later; a host they cannot bind kills the buffer's `__init__` seconds
    after Ray starts, in a Ray error that never names the key. Checked the way they bind:
    the run's ZeroMQ transport binds a socket on `tcp://HOST:0` (any free port), closed at
    once. ZeroMQ binds an IPv4 address, an interface name, localhost or *, never a DNS name,
    and no IPv6 address (the run's sockets do not enable IPv6): a plain socket's bind would
    pass hosts the run then fails on.

    Joining a cluster (`joined`), the buffer and the learner may run on other nodes, whose
    addresses this machine need not have: the bind is skipped there and only the host's form
    is checked, which no node could bind otherwise."""
    if host in _ANY_HOST or host == "node":  # node: each process's own node's address
        return
    if joined:
        if not _bindable_form(host):
            raise ConfigError(
                f"launch.bind_host: {host!r} cannot be bound on any node: ZeroMQ binds "
                f"{_ZMQ_HOSTS} (not a DNS name nor, here, IPv6); 0.0.0.0 binds every interface")
        return
    reason = _zmq_bind_error(host)
    if reason is not None:
        raise ConfigError(
            f"launch.bind_host: cannot bind {host!r} on this machine ({reason}); use an "
            "address of one of this machine's interfaces, e.g. 127.0.0.1")


def _bindable_form(host: str) -> bool:
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    return bool(_INTERFACE_NAME.fullmatch(host))


def _zmq_bind_error(host: str) -> str | None:
    """Why the run's ZeroMQ transport cannot bind `host` here, as the buffer binds it (a PULL
    socket on `tcp_endpoint(host)`, any free port), in the OS's words; None when it can."""
    from agent_r1_async.wire.transport import tcp_endpoint
    from agent_r1_async.wire.zmq import ZmqTransport

    transport = ZmqTransport()
    try:
        transport.puller(tcp_endpoint(host)).close()
        return None
    except Exception as e:  # zmq.ZMQError: the OS's errno, libzmq's text with the address
        code = getattr(e, "errno", None)
        reason = os.strerror(code) if isinstance(code, int) and 0 < code < 1000 else (
            str(e).split(" (addr=")[0])
        if code == errno.ENODEV:
            reason += f": ZeroMQ binds {_ZMQ_HOSTS}, not a host name or an IPv6 address"
        return reason
    finally:
        transport.close()


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

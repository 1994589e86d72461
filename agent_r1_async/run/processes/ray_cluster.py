"""Ray at the edge: start a local Ray or join a cluster, with the env every process gets;
the driver's own Ray notices into its log (`quiet_ray_driver`); the cluster's node table.

A local Ray is private to the launch's user:
- it advertises 127.0.0.1, so every Ray process connects to the others over loopback;
- its token is fresh for the run and lives only in the environment of the launch's own
  processes (`/proc/PID/environ` is readable by their user and root), never in
  `~/.ray/auth_token` (which Ray writes world-readable);
- its session directory sits under a 0700 directory of the launch's user (Ray makes its own
  session directories 0777), removed when Ray stops.
Ray's gRPC servers listen on every interface whatever address they advertise (Ray 2.60 has no
setting for it): the token is what keeps other hosts out (docs/reliability.md, "Trust").
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig

BUFFER_NUM_CPUS = 0.5
"""CPUs Ray reserves for the buffer process (run/processes/buffer_group.py)."""


def _cpus_needed(cfg: RunConfig) -> float:
    return (cfg.learner.world_size * cfg.learner.num_cpus
            + cfg.actors.num_actors * cfg.actors.num_cpus + BUFFER_NUM_CPUS)


def ray_address(cfg: RunConfig, address: str | None) -> str | None:
    return address or cfg.launch.address or os.environ.get("RAY_ADDRESS") or None


def set_ray_auth(address: str | None) -> None:
    """Ray's token, set before `import ray` (Ray reads the mode when it is imported).
    Joining a cluster: Ray heads use token auth by default and a joining driver must opt in to
    send the token it holds. A local Ray: a fresh token for this run, kept in the
    environment only (module docstring), unless the user gave one (`RAY_AUTH_TOKEN`,
    `RAY_AUTH_TOKEN_PATH`) or turned auth off (`RAY_AUTH_MODE=disabled`). `RAY_AUTH_MODE=token`
    alone (which Ray itself sets in a process that started a local Ray) still gets a fresh
    token: else Ray would use `~/.ray/auth_token`."""
    given = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    mode = os.environ.get("RAY_AUTH_MODE")
    if address:
        if (given or (Path.home() / ".ray" / "auth_token").exists()) and mode is None:
            os.environ["RAY_AUTH_MODE"] = "token"
    elif not given and mode in (None, "token"):
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


ENV = {"TOKENIZERS_PARALLELISM": "false"}


def start_ray(cfg: RunConfig, address: str | None) -> None:
    address = ray_address(cfg, address)
    set_ray_auth(address)
    import ray

    env = {**ENV, "VLLM_CPU_KVCACHE_SPACE": str(cfg.engine.kv_cache_gb)}
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=cfg.logging.verbose)
        return
    # Logical CPUs: at least what the processes ask for, so a 2-core box never deadlocks on
    # placement (they share the cores; the OS schedules them).
    num_cpus = cfg.launch.num_cpus or max(os.cpu_count() or 1, math.ceil(_cpus_needed(cfg)))
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=cfg.logging.verbose,
        configure_logging=False,
        **private_local_ray(),
    )


_private_dirs: list[str] = []


def private_local_ray() -> dict[str, str]:
    """The `ray.init` arguments of a local Ray only this user can reach (module docstring;
    its token: `set_ray_auth`)."""
    private = tempfile.mkdtemp(prefix="ar1-ray-")  # 0700; short: Ray's socket paths live here
    _private_dirs.append(private)
    return {"_temp_dir": os.path.join(private, "ray"), "_node_ip_address": "127.0.0.1"}


def local_temp_dir() -> str | None:
    """The private directory of the local Ray this process started (None when it joined a
    cluster or started none)."""
    return _private_dirs[-1] if _private_dirs else None


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
    while _private_dirs:
        shutil.rmtree(_private_dirs.pop(), ignore_errors=True)




def quiet_ray_driver() -> None:
    """Ray's driver notices go to `logging` (the driver's log file, run/output/logs.py
    `quiet_driver`), not to the console.

    Ray's import gives its "ray" logger a stderr handler of its own and stops it propagating
    (`ray.init(configure_logging=False)` then drops the handler: its records would reach stderr
    through logging's last resort): its driver records go to the file too. The driver prints
    the raylet's error reports (a worker died: a paragraph each) straight to sys.stdout; the
    launch says those once in its own words (run/output/events.py)."""
    import logging

    import ray  # noqa: F401 - installs that handler now, so that it can be removed

    ray_logger = logging.getLogger("ray")
    for h in list(ray_logger.handlers):
        ray_logger.removeHandler(h)
    ray_logger.propagate = True
    with contextlib.suppress(Exception):  # a private hook: if it moved, Ray prints them itself
        from ray._private import worker as ray_worker

        def to_log(data: dict, ignore_prefix: bool = False) -> None:
            for line in data.get("lines", []):
                ray_logger.warning("(%s) %s", data.get("pid", "ray"), line)

        ray_worker.print_to_stdstream = to_log
        ray_worker._worker_logs_enabled = False  # its other paths (leftovers at shutdown)


def ray_nodes() -> list[dict[str, Any]]:
    """Ray's node table (`ray.nodes()`) of the cluster this driver joined."""
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()
    return nodes

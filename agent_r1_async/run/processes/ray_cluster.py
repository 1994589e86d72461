"""Ray at the edge: start a local Ray or join a cluster, with the env every process gets."""

from __future__ import annotations

import math
import os
from pathlib import Path

from agent_r1_async.config import RunConfig


def _cpus_needed(cfg: RunConfig) -> float:
    return (cfg.learner.world_size * cfg.learner.num_cpus
            + cfg.actors.num_actors * cfg.actors.num_cpus + 0.5)


def ray_address(cfg: RunConfig, address: str | None) -> str | None:
    return address or cfg.launch.address or os.environ.get("RAY_ADDRESS") or None


def use_cluster_token(address: str | None) -> None:
    """Ray heads use token auth by default and a driver joining one must opt in to send the
    token. Ray reads the mode when it is imported: call this before `import ray`."""
    has_token = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or (
        Path.home() / ".ray" / "auth_token").exists()
    if address and has_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"


ENV = {"TOKENIZERS_PARALLELISM": "false"}


def start_ray(cfg: RunConfig, address: str | None) -> None:
    address = ray_address(cfg, address)
    use_cluster_token(address)
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
    )


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()



"""The launch's one preflight, and the env checks `eval` and `sft` share with it: everything a
run is refused for before Ray starts or a run directory is made."""

from __future__ import annotations

from agent_r1_async.config import ConfigError, RunConfig
from agent_r1_async.run.preflight.feasibility import check_feasible
from agent_r1_async.run.preflight.memory import memory_preflight
from agent_r1_async.run.processes.ray_cluster import ray_address


def preflight(cfg: RunConfig, address: str | None = None, resume: str | None = None, *,
              memory: bool = False, force: bool = False, fresh: bool = False) -> None:
    """Fail before Ray starts or a run directory is made: the policy or init checkpoint
    cannot be found, a configured engine backend is not installed, the env cannot be
    imported, configured, built or has no tasks (`env_preflight`), the run cannot fit its
    buffer, this machine's CPUs/GPUs, its bind host or its run root, or `resume` has no
    checkpoint and `fresh` does not allow that (feasibility.py), or, with `memory`, this
    machine's memory (memory.py; `force` turns its refusal into a warning).

    Known aliases are prepared later by the processes that load them (cached, once); local
    paths must exist and hold a HF model; a hub id is left to the loader (it needs network).
    """
    from agent_r1_async.actors.engines import require_backend
    from agent_r1_async.models import KNOWN_MODELS, TINY_MODEL_ALIAS, resolve_model

    for key, value in (("model.name_or_path", cfg.model.name_or_path),
                       ("model.init_from", cfg.model.init_from)):
        if not value or value in KNOWN_MODELS or value == TINY_MODEL_ALIAS:
            continue
        try:
            resolve_model(value)
        except (FileNotFoundError, KeyError) as e:
            raise ConfigError(f"{key}: {e}") from None
    backends = {("engine.backend", cfg.engine.backend)}
    if cfg.eval.in_launch:
        backends.add(("eval.backend", cfg.eval.backend or cfg.engine.backend))
    for key, backend in sorted(backends):
        try:
            require_backend(backend)
        except RuntimeError as e:
            raise ConfigError(f"{key}: {e}") from None
    env_preflight(cfg, "launch")
    check_feasible(cfg, address, resume, fresh)
    if memory:
        memory_preflight(cfg, force=force, joined=ray_address(cfg, address) is not None)


def episodes_in_flight(cfg: RunConfig) -> tuple[int, int]:
    """(episodes one actor plays at once, actors): what an env server that holds a session
    per episode must serve (`probe_capacity`)."""
    return cfg.actors.groups_in_flight * cfg.algorithm.group_size, cfg.actors.num_actors


def env_preflight(cfg: RunConfig, command: str, split: str | None = None) -> None:
    """The env's cheap checks (env_check.py) for the splits `command` will use: the actors
    need one train task per actor; evaluations need one task of their split."""
    from agent_r1_async.run.preflight.env_check import preflight_env

    env = cfg.env
    splits = {split or env.eval_split: 1} if command == "eval" else {env.train_split: 1}
    if command == "launch":
        splits[env.train_split] = cfg.actors.num_actors
        if cfg.eval.in_launch:
            splits.setdefault(env.eval_split, 1)
    if command == "sft" and (cfg.sft.eval_before or cfg.sft.eval_after):
        splits.setdefault(env.eval_split, 1)
    spec = preflight_env(env, splits)
    probe = getattr(spec.definition, "probe_capacity", None)
    if command == "launch" and probe is not None:  # a server's sessions: one per episode
        probe(*episodes_in_flight(cfg))
    if command != "sft":
        from agent_r1_async.actors.endpoint.episodes import check_credentials
        from agent_r1_async.envs.agent import AgentDefinition

        if isinstance(spec.definition, AgentDefinition):
            check_credentials(cfg, spec.definition)

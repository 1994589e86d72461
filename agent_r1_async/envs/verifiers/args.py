"""`env.args` of the `verifiers` env (envs/verifiers/env.py)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

_RANGE = re.compile(r"(-?\d*):(-?\d*)")
DEFAULT_PYTHON = ".venv-verifiers/bin/python"


def parse_range(text: str) -> slice:
    """'start:stop' (Python slice bounds, either may be empty or negative) as a slice."""
    match = _RANGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not 'start:stop' (e.g. '0:800', '-100:')")
    start, stop = (int(g) if g else None for g in match.groups())
    return slice(start, stop)


class VerifiersArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A verifiers v1 environment, served by verifiers' own EnvServer in its own venv."""

    taskset: str
    """The taskset id: a package (or module) the verifiers environment can import, exporting
    its `Taskset` subclass in `__all__` (and, optionally, the `Harness` that plays it)."""
    taskset_args: dict[str, Any] = {}
    """More keys of the taskset's config (`--env.taskset.*` in verifiers' CLI)."""
    harness: dict[str, Any] = {}
    """The agent seat's harness config, `{id: ..., ...}` (empty: the taskset's own harness,
    else verifiers' default). Harnesses that install a program at their first rollout need
    network access then."""
    env_config: dict[str, Any] = {}
    """More keys of the verifiers EnvConfig (`id` of a paired env, `timeout`, ...)."""
    runtime: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "subprocess"})
    """Where the harness runs (verifiers' RuntimeConfig); the default runs it on this host."""
    splits: dict[str, str] = msgspec.field(
        default_factory=lambda: {"train": ":-200", "dev": "-200:-100", "test": "-100:"})
    """Split name -> 'start:stop', an index range of the taskset's tasks in load order."""
    python: str = DEFAULT_PYTHON
    """The verifiers environment's interpreter (relative paths: from the working
    directory). `scripts/setup.sh` creates the default one."""
    pythonpath: list[str] = []
    """Directories put first on that interpreter's module path (relative ones: from the
    working directory), e.g. where the taskset's module lives."""
    max_concurrent: int = 0
    """Episodes the server runs at once (0: as many as the actor has in flight)."""
    start_timeout_s: float = 120.0
    """How long the server has to bind its address after it is started."""
    restarts: int = 2
    """Times a process restarts its server after the server exited; then every episode fails
    naming it."""
    timeout_s: float = 0.0
    """Longest an episode may run (0 = env.step_timeout_s x env.max_turns)."""

    def __post_init__(self) -> None:
        if not self.taskset.strip():
            raise ValueError("taskset: must name a verifiers taskset")
        if not self.splits:
            raise ValueError("splits: must name at least one split")
        for name, text in self.splits.items():
            try:
                parse_range(text)
            except ValueError as e:
                raise ValueError(f"splits.{name}: {e}") from None
        if self.harness and not isinstance(self.harness.get("id"), str):
            raise ValueError("harness: needs an id (the harness package), e.g. {id: bash}")
        for key in ("start_timeout_s",):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0")
        for key in ("timeout_s", "max_concurrent", "restarts"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        clash = sorted({"taskset", "agent"} & set(self.env_config))
        if clash:
            raise ValueError(f"env_config: {clash[0]!r} is set by taskset/taskset_args and "
                             "harness/runtime")

    def env_data(self, max_turns: int) -> dict[str, Any]:
        """The verifiers EnvConfig data these args describe."""
        agent: dict[str, Any] = {"runtime": dict(self.runtime), "max_turns": max_turns}
        if self.harness:
            agent["harness"] = dict(self.harness)
        return {**self.env_config, "taskset": {**self.taskset_args, "id": self.taskset},
                "agent": agent}

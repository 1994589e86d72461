"""The buffer's stats as the launcher sees them, for the tests of what they show."""

from __future__ import annotations

from typing import Any

T0 = 1000.0  # the buffer's wall clock at the first look


def actor(t: float, done: int = 0, failed: int = 0, last_error: str = "") -> dict[str, Any]:
    return {"time": t, "policy_version": 0, "episodes_done": done, "episodes_failed": failed,
            "last_error": last_error}


def buffer(t: float, actors: dict[str, Any], version: int = 0, ready: int = 0,
            sampled: int = 0, **drops: int) -> dict[str, Any]:
    return {"time": t, "learner_version": version, "groups_ready": ready,
            "sampled_groups": sampled, "actors": actors,
            "drops": {k.replace("__", "/"): v for k, v in drops.items()}}

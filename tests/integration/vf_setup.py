"""What the verifiers tests share: the verifiers environment (`.venv-verifiers/`, made by
`scripts/setup.sh`) and a config for the test-defined env (tests/integration/vf_envs/).

`needs_verifiers` marks a module whose tests need that environment: without it they skip,
except in CI (`.ci/run`), where they fail naming it (tests/setup_needs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.setup_needs import missing_setup

ROOT = Path(__file__).resolve().parents[2]
VF_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
VF_ENVS = Path(__file__).resolve().parent / "vf_envs"

needs_verifiers = pytest.mark.usefixtures("verifiers_venv")
"""The fixture (tests/conftest.py) calls `require_verifiers`."""


def require_verifiers() -> None:
    """Return when the verifiers environment is here; else skip, or fail in CI."""
    if not VF_PYTHON.exists():
        missing_setup(f"the verifiers environment is missing ({VF_PYTHON})")


def vf_env(log_dir: str = "", mode: str = "ok", **args: Any) -> dict[str, Any]:
    """`env` config of the test-defined verifiers env `vf-echo`."""
    return {"name": "verifiers", "max_turns": 4, "step_timeout_s": 30.0,
            "args": {"taskset": "vf-echo", "python": str(VF_PYTHON),
                     "pythonpath": [str(VF_ENVS)],
                     "taskset_args": {"mode": mode},
                     "harness": {"id": "vf-echo", "log_dir": log_dir, "mode": mode},
                     "splits": {"train": "0:4", "dev": "4:6"}, **args}}

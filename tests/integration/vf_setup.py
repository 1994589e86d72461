"""What the verifiers tests share: the verifiers environment (`.venv-verifiers/`, made by
`scripts/setup.sh`) and a config for the test-defined env (tests/integration/vf_envs/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VF_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
VF_ENVS = Path(__file__).resolve().parent / "vf_envs"

needs_verifiers = pytest.mark.skipif(
    not VF_PYTHON.exists(), reason=f"{VF_PYTHON} missing: `bash scripts/setup.sh` creates it")


def vf_env(log_dir: str = "", mode: str = "ok", **args: Any) -> dict[str, Any]:
    """`env` config of the test-defined verifiers env `vf-echo`."""
    return {"name": "verifiers", "max_turns": 4, "step_timeout_s": 30.0,
            "args": {"taskset": "vf-echo", "python": str(VF_PYTHON),
                     "pythonpath": [str(VF_ENVS)],
                     "taskset_args": {"mode": mode},
                     "harness": {"id": "vf-echo", "log_dir": log_dir, "mode": mode},
                     "splits": {"train": "0:4", "dev": "4:6"}, **args}}

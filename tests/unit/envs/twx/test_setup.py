"""scripts/setup.sh installs textworld-express, pinned as the `twx` extra and the env's
install hint pin it, where Java is."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

from agent_r1_async.envs.twx.requirements import PACKAGE_PIN

ROOT = Path(__file__).resolve().parents[4]


def test_one_pin_in_the_extra_the_hint_and_the_setup_plan():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["twx"] == [PACKAGE_PIN] == ["textworld-express==1.1.0"]
    out = subprocess.run(["bash", "scripts/setup.sh", "--dry-run"], cwd=ROOT, text=True,
                         capture_output=True, timeout=60,
                         env={**os.environ, "AGENT_R1_ASYNC_SETUP": "cpu"})
    assert out.returncode == 0, out.stderr
    pip = ".venv/bin/python -m pip --disable-pip-version-check -q"
    assert (f"+ {pip} install {PACKAGE_PIN} (only where java is on PATH)"
            in out.stdout.splitlines())

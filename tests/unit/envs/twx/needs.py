"""When the textworld_express tests may skip: only where Java is absent, outside CI.

Java is in this machine's image and in CI, and scripts/setup.sh installs the package where
`java` is; so in CI (`.ci/run` sets AGENT_R1_ASYNC_REQUIRE_SETUP, CI services set `CI`:
tests/setup_needs.py) anything missing fails the run, and with Java present a missing package
fails too (setup was not run). Only a machine without Java, outside CI, skips.
"""

from __future__ import annotations

import shutil

import pytest

from agent_r1_async.envs.twx.requirements import missing
from tests.setup_needs import setup_required


def require_twx() -> None:
    """Return when the env can run here; else skip or fail (see the module docstring)."""
    line = missing()
    if not line:
        return
    if setup_required():
        pytest.fail(f"{line}: CI runs the textworld_express tests (scripts/setup.sh installs "
                    "the package where java is)")
    if shutil.which("java") is None:
        pytest.skip(line)
    pytest.fail(f"{line}: java is here, so run scripts/setup.sh")

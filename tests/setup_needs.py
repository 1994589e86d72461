"""Tests that need a piece `scripts/setup.sh` provides skip without it, except in CI.

`.ci/run` runs scripts/setup.sh, then the test command with `AGENT_R1_ASYNC_REQUIRE_SETUP=1`:
there a missing piece (the verifiers environment `.venv-verifiers/`, vLLM, peft, the
textworld_express package) means the set-up is broken, and a skip would hide the tests it
turns off, so the test fails instead, naming what is missing and the command that makes it.
`CI` (set by CI services) counts the same. Elsewhere (a machine where setup was not run) the
test skips with the same line.

Skips that depend on the machine, not on the set-up (a GPU, a C++ compiler, a CPU flag,
bubblewrap, which setup.sh installs only as root and which needs user namespaces) stay skips.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRE_SETUP = "AGENT_R1_ASYNC_REQUIRE_SETUP"
"""Set (to anything but "" or "0") by `.ci/run`: a missing set-up piece fails its tests."""
SETUP = "bash scripts/setup.sh"


def setup_required() -> bool:
    """Whether this run must have everything scripts/setup.sh provides (CI)."""
    return os.environ.get(REQUIRE_SETUP, "") not in ("", "0") or bool(os.environ.get("CI"))


def missing_setup(line: str) -> NoReturn:
    """`line` (what is missing) fails the test where the set-up is required, else skips it."""
    if setup_required():
        pytest.fail(f"{line}; `{SETUP}` makes it, and this run requires it "
                    f"({REQUIRE_SETUP} or CI is set), so the test fails instead of skipping",
                    pytrace=False)
    pytest.skip(f"{line} (`{SETUP}` makes it)", allow_module_level=True)


def require_module(name: str) -> ModuleType:
    """`pytest.importorskip(name)`, except that in CI a missing module fails the test (or
    the module's collection, when called at module level)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing_setup(f"{name} cannot be imported ({type(e).__name__}: {e})")

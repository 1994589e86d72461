"""A test whose set-up piece is missing skips on a machine where setup was not run, and fails in
CI (tests/setup_needs.py); `.ci/run` asks for that, then runs the README's test command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import setup_needs
from tests.integration import vf_setup
from tests.setup_needs import REQUIRE_SETUP, missing_setup, require_module

ROOT = Path(__file__).resolve().parents[2]
NO_MODULE = "agent_r1_async_no_such_module"


@pytest.fixture
def outside_ci(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(REQUIRE_SETUP, raising=False)
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


@pytest.mark.parametrize("env", [{}, {REQUIRE_SETUP: "0"}, {REQUIRE_SETUP: ""}],
                         ids=["unset", "0", "empty"])
def test_outside_ci_a_missing_piece_skips_naming_it_and_the_setup(outside_ci, env):
    for name, value in env.items():
        outside_ci.setenv(name, value)
    assert not setup_needs.setup_required()
    with pytest.raises(pytest.skip.Exception, match=r"^the thing is missing \(`bash scripts/"
                                                    r"setup\.sh` makes it\)$"):
        missing_setup("the thing is missing")
    with pytest.raises(pytest.skip.Exception, match=f"^{NO_MODULE} cannot be imported "):
        require_module(NO_MODULE)
    assert require_module("json").dumps([]) == "[]"


@pytest.mark.parametrize("env", [{REQUIRE_SETUP: "1"}, {"CI": "true"}], ids=[REQUIRE_SETUP, "CI"])
def test_in_ci_a_missing_piece_fails_naming_it_and_the_setup(outside_ci, env):
    for name, value in env.items():
        outside_ci.setenv(name, value)
    assert setup_needs.setup_required()
    with pytest.raises(pytest.fail.Exception) as err:
        missing_setup("the thing is missing")
    assert str(err.value) == (
        "the thing is missing; `bash scripts/setup.sh` makes it, and this run requires it "
        f"({REQUIRE_SETUP} or CI is set), so the test fails instead of skipping")
    with pytest.raises(pytest.fail.Exception, match=f"^{NO_MODULE} cannot be imported "):
        require_module(NO_MODULE)


def test_the_verifiers_tests_skip_or_fail_without_their_environment(outside_ci, tmp_path):
    outside_ci.setattr(vf_setup, "VF_PYTHON", tmp_path / "bin" / "python")
    line = f"the verifiers environment is missing ({tmp_path / 'bin' / 'python'})"
    with pytest.raises(pytest.skip.Exception, match=line.replace("(", r"\(").replace(")", r"\)")):
        vf_setup.require_verifiers()
    outside_ci.setenv(REQUIRE_SETUP, "1")
    with pytest.raises(pytest.fail.Exception) as err:
        vf_setup.require_verifiers()
    assert str(err.value).startswith(f"{line}; `bash scripts/setup.sh` makes it")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    vf_setup.require_verifiers()  # here: runs


def test_ci_requires_the_setup_and_runs_the_readmes_test_command():
    command = '.venv/bin/python -m pytest -m "not gpu and not slow"'
    assert f"`{command}` runs what CI runs" in (ROOT / "README.md").read_text()
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    (last,) = [ln for ln in lines if "pytest" in ln]
    assert last == lines[-1] and last.endswith(f"&& {command}")
    assert f"export {REQUIRE_SETUP}=1" in lines[:lines.index(last)]

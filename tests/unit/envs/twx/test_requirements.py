"""A machine without the package or Java: launch, eval and `envs check` say so in one line,
with the commands that install them. Runs everywhere (Java not needed)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from agent_r1_async.config import ConfigError, EnvConfig, config_from_dict
from agent_r1_async.envs.twx import requirements
from agent_r1_async.run.preflight.checks import env_preflight
from agent_r1_async.run.preflight.env_check import check_env, preflight_env
from tests.setup_needs import REQUIRE_SETUP
from tests.unit.envs.twx import needs

NO_PACKAGE = ("env textworld_express needs the textworld_express package "
              "(`pip install textworld-express==1.1.0`)")
NO_JAVA = ("env textworld_express needs a Java runtime, `java` on PATH "
           "(`apt-get install openjdk-17-jre-headless`)")
NEITHER = ("env textworld_express needs the textworld_express package "
           "(`pip install textworld-express==1.1.0`) and a Java runtime, `java` on PATH "
           "(`apt-get install openjdk-17-jre-headless`)")


def _hide(monkeypatch, package: bool, java: bool) -> None:
    real_find, real_which = importlib.util.find_spec, shutil.which
    if package:
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                            if name == "textworld_express" else real_find(name, *a))
    if java:
        monkeypatch.setattr(shutil, "which", lambda cmd, *a, **k: None
                            if cmd == "java" else real_which(cmd, *a, **k))


@pytest.mark.parametrize(("package", "java", "line"), [
    (True, False, NO_PACKAGE), (False, True, NO_JAVA), (True, True, NEITHER)],
    ids=["no-package", "no-java", "neither"])
def test_the_missing_line_names_what_is_missing_and_how_to_install_it(
        monkeypatch, package: bool, java: bool, line: str):
    _hide(monkeypatch, package, java)
    assert requirements.missing() == line
    with pytest.raises(ConfigError) as err:  # launch, eval and sft: the env preflight
        preflight_env(EnvConfig(name="textworld_express"), {"train": 1})
    assert str(err.value) == line


def test_launch_and_envs_check_print_the_line(monkeypatch):
    _hide(monkeypatch, package=False, java=True)
    cfg = config_from_dict({"env": {"name": "textworld_express", "args": {"game": "cooking"}}})
    for command in ("launch", "eval"):
        with pytest.raises(ConfigError) as err:
            env_preflight(cfg, command)
        assert str(err.value) == NO_JAVA
    ok, lines = check_env(cfg.env, ["train"])
    assert not ok and lines[-1] == f"  FAILED  {NO_JAVA}"


@pytest.mark.parametrize("ci", [{"CI": "true"}, {REQUIRE_SETUP: "1"}], ids=["CI", REQUIRE_SETUP])
def test_the_tests_skip_only_without_java_outside_ci(monkeypatch, ci: dict[str, str]):
    monkeypatch.setattr(needs, "missing", lambda: NO_PACKAGE)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(REQUIRE_SETUP, raising=False)
    for name, value in ci.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(pytest.fail.Exception, match="CI runs the textworld_express tests"):
        needs.require_twx()
    for name in ci:
        monkeypatch.delenv(name)
    monkeypatch.setattr(needs.shutil, "which", lambda cmd: "/usr/bin/java")
    with pytest.raises(pytest.fail.Exception, match=r"java is here, so run scripts/setup\.sh"):
        needs.require_twx()
    monkeypatch.setattr(needs.shutil, "which", lambda cmd: None)
    with pytest.raises(pytest.skip.Exception):
        needs.require_twx()
    monkeypatch.setattr(needs, "missing", lambda: "")
    needs.require_twx()  # everything here: runs

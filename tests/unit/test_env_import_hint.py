"""A `@register_env` name whose module nothing imports: the error says to list it in
`env.import`, naming the module when one next to the config registers it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_r1_async.envs.registry import UnknownEnvError, registering_modules, resolve

MODULE = '''
from agent_r1_async.envs.registry import register_env


@register_env( "units_hint" )
class UnitsHint:
    """Registered, but imported by nobody."""
'''


def test_the_unknown_name_error_names_the_module_that_registers_it(tmp_path: Path, monkeypatch):
    (tmp_path / "my_units.py").write_text(MODULE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "more.py").write_text(MODULE.replace("units_hint", "deep_hint"))
    (tmp_path / "other.py").write_text('register_env("units_hint_2")\n')  # another name
    monkeypatch.chdir(tmp_path)
    assert registering_modules("units_hint") == ["my_units"]
    assert registering_modules("deep_hint") == ["pkg.more"]
    with pytest.raises(UnknownEnvError) as info:
        resolve("units_hint")
    assert str(info.value).endswith(
        "(or give a class as 'package.module:Class'); module my_units registers 'units_hint' but "
        "nothing imports it: add it to env.import (--set env.import=[my_units])")


def test_without_such_a_module_the_error_still_mentions_env_import(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownEnvError) as info:
        resolve("units_hint")
    assert str(info.value).endswith(
        "; a name registered with @register_env needs its module in env.import "
        "(--set env.import=[my_module])")

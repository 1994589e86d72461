"""Env registry (envs/registry.py): decorator, entry point (a real dist-info on sys.path),
import path, errors; `@register_env` names resolving through `env.import`.

The working directory is importable for every command, and `@register_env` names resolve from
the command line through `env.import`. The CLI runs as the installed console script does: from
a script outside the working directory (so Python puts the script's directory, not the working
directory, on sys.path). Without that, `eval` and `sft` (and `launch`'s in-process steps) fail
with `No module named 'unit_env'`, and a `@register_env` name is unknown: nothing imports it.

A `@register_env` name whose module nothing imports: the error says to list it in
`env.import`, naming the module when one next to the config registers it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import registry
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import (
    UnknownEnvError,
    get_env_spec,
    list_envs,
    register_env,
    registering_modules,
    resolve,
)
from agent_r1_async.envs.toolenv import ToolEnv
from tests.fakes.envs import FakeDomain


class EchoArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    word: str = "gold"
    n: int = 2


class EchoEnvDef:
    """Say the word back (test env)."""

    Args = EchoArgs

    def __init__(self, args: EchoArgs, env_cfg: EnvConfig) -> None:
        self.args, self.env_cfg = args, env_cfg

    def make(self) -> ToolEnv:
        return ToolEnv(
            FakeDomain(),
            max_turns=self.env_cfg.max_turns,
            tool_timeout_s=self.env_cfg.tool_timeout_s,
        )

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"{split}-{i}", "Say it.", self.args.word) for i in range(self.args.n)]


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_decorator_registers_and_spec_works(clean_registry):
    register_env("echo_test")(EchoEnvDef)
    spec = get_env_spec(EnvConfig(name="echo_test", max_turns=3, args={"word": "hi", "n": 3}))
    assert spec.name == "echo_test" and spec.description == "Say the word back (test env)."
    tasks = spec.tasks("dev")
    assert [t.task_id for t in tasks] == ["dev-0", "dev-1", "dev-2"] and tasks[0].answer == "hi"
    env = spec.make()
    assert isinstance(env, ToolEnv) and env.max_turns == 3 and env is not spec.make()
    assert spec.oracle(tasks[0]) is None  # no oracle() on the definition

    async def episode():
        await env.reset(tasks[0])
        return await env.step("<answer>hi</answer>")

    assert asyncio.run(episode()).outcome_reward == 1.0
    assert ("echo_test", "Say the word back (test env).") in list_envs()


def test_builtins_are_listed():
    names = dict(list_envs())
    assert {"multihop_qa", "arithmetic"} <= set(names)
    assert all(names[n] for n in ("multihop_qa", "arithmetic"))


def test_import_path():
    spec = get_env_spec(EnvConfig(name=f"{__name__}:EchoEnvDef", args={"n": 1}))
    assert len(spec.tasks("train")) == 1
    with pytest.raises(ConfigError, match=r"cannot import 'nope.module:X'"):
        get_env_spec(EnvConfig(name="nope.module:X"))
    with pytest.raises(ConfigError, match="is not a class"):
        get_env_spec(EnvConfig(name=f"{__name__}:test_import_path"))


def test_unknown_name_lists_known_envs():
    with pytest.raises(UnknownEnvError) as err:
        get_env_spec(EnvConfig(name="multihopqa"))
    msg = str(err.value)
    assert (
        msg.startswith("unknown env 'multihopqa'; known envs: ")
        and "arithmetic, blackbox, mcp_tools, multihop_qa, openenv, python_tool" in msg
    )
    assert isinstance(err.value, KeyError)


def test_args_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"unknown config key `env.args.wrd`"):
        get_env_spec(EnvConfig(name=f"{__name__}:EchoEnvDef", args={"wrd": "x"}))
    with pytest.raises(ConfigError, match=r"`env.args.n`: Expected `int`, got `str`"):
        get_env_spec(EnvConfig(name=f"{__name__}:EchoEnvDef", args={"n": "two"}))
    with pytest.raises(ConfigError, match=r"config key `env.args.digits`: must be in 1..9"):
        get_env_spec(EnvConfig(name="arithmetic", args={"digits": 0}))
    with pytest.raises(ConfigError) as err:  # a bad key of a dict-valued arg
        get_env_spec(EnvConfig(name="world", args={"mix": {"shorty": 1.0}}))
    assert str(err.value) == ("config key `env.args.mix`: a key: Invalid enum value 'shorty' "
                              "(one of long, medium, short, xlong)")


def test_entry_point_from_a_dist_info_on_sys_path(tmp_path, monkeypatch, clean_registry):
    (tmp_path / "fake_env_plugin.py").write_text(
        textwrap.dedent("""
        from agent_r1_async.envs.base import Task
        from tests.fakes.envs import FakeDomain
        from agent_r1_async.envs.toolenv import ToolEnv

        class PluginEnv:
            description = "A plugin env from an entry point."

            def __init__(self, args, env_cfg):
                self.env_cfg = env_cfg

            def make(self):
                return ToolEnv(FakeDomain(), max_turns=2, tool_timeout_s=1.0)

            def tasks(self, split):
                return [Task("p0", "Say it.", "gold")]

            def oracle(self, task):
                return ["<answer>gold</answer>"]
    """)
    )
    dist = tmp_path / "fake_env_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-env-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[agent_r1_async.envs]\nplugin_env = fake_env_plugin:PluginEnv\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ("plugin_env", "A plugin env from an entry point.") in list_envs()
    spec = get_env_spec(EnvConfig(name="plugin_env"))
    task = spec.tasks("train")[0]
    assert spec.oracle(task) == ["<answer>gold</answer>"]
    with pytest.raises(ConfigError, match=r"unknown config key `env\.args\.x`"):
        get_env_spec(EnvConfig(name="plugin_env", args={"x": 1}))  # no Args: nothing allowed


def test_bad_registrations():
    with pytest.raises(ValueError, match="contain no ':'"):
        register_env("a:b")


ROOT = Path(__file__).resolve().parents[3]

UNIT_ENV = '''
from agent_r1_async.envs.arithmetic import ArithmeticEnv
from agent_r1_async.envs.registry import register_env


@register_env("units")
class UnitsEnv(ArithmeticEnv):
    """Unit conversion (test env)."""
'''

SHIM = '''
import sys
from agent_r1_async.cli import main
from agent_r1_async.run.processes.child import in_subprocess
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.config import EnvConfig

if __name__ == "__main__" and sys.argv[1] == "spawn":
    # a spawned child (held-out evals, warm start) resolves it too
    main(["config", "show"])  # any command: sets up the working directory
    spec = in_subprocess(get_env_spec, EnvConfig(name="unit_env:UnitsEnv"))
    print("SPAWNED", spec.name)
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "unit_env.py").write_text(UNIT_ENV)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "shim.py").write_text(SHIM)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(tmp_path / "bin" / "shim.py"), *argv],
                          capture_output=True, text=True, cwd=work, env=env, timeout=120)


def test_module_in_the_working_directory_resolves_for_every_command(tmp_path):
    out = _cli(tmp_path, "envs", "check", "unit_env:UnitsEnv", "--split", "dev")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[1] == "  import  unit_env:UnitsEnv"
    out = _cli(tmp_path, "spawn")
    assert out.returncode == 0 and "SPAWNED unit_env:UnitsEnv" in out.stdout, out.stderr[-2000:]


def test_register_env_names_resolve_through_env_import(tmp_path):
    out = _cli(tmp_path, "envs", "check", "units", "--split", "dev")
    assert out.returncode == 1 and "  FAILED  env.name: unknown env 'units'" in out.stdout
    out = _cli(tmp_path, "envs", "check", "units", "--split", "dev", "--set", "env.import=[unit_env]")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[1] == "  import  unit_env:UnitsEnv"
    out = _cli(tmp_path, "envs", "list", "--set", "env.import=[unit_env]")
    assert "units                Unit conversion (test env)." in out.stdout.splitlines()
    out = _cli(tmp_path, "config", "show", "--set", "env.import=[no_such_mod]")
    assert out.returncode == 2
    assert "env.import: cannot import 'no_such_mod': No module named 'no_such_mod'" in out.stderr


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

"""Env registry: decorator, entry point (a real dist-info on sys.path), import path, errors."""

from __future__ import annotations

import asyncio
import textwrap

import msgspec
import pytest

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import registry
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import UnknownEnvError, get_env_spec, list_envs, register_env
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
        and "arithmetic, mcp_tools, multihop_qa, python_tool" in msg
    )
    assert isinstance(err.value, KeyError)


def test_args_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"unknown config key `env.args.wrd`"):
        get_env_spec(EnvConfig(name=f"{__name__}:EchoEnvDef", args={"wrd": "x"}))
    with pytest.raises(ConfigError, match=r"`env.args.n`: Expected `int`, got `str`"):
        get_env_spec(EnvConfig(name=f"{__name__}:EchoEnvDef", args={"n": "two"}))
    with pytest.raises(ConfigError, match=r"config key `env.args.digits`: must be in 1..9"):
        get_env_spec(EnvConfig(name="arithmetic", args={"digits": 0}))


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

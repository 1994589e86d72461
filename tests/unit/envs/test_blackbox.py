"""The `blackbox` env's definition: `env.args` errors name their key, the agent's signature is
checked when the env is built, tasks come from the user's function, and an episode cannot be
played outside an actor (one line)."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.agent import AgentDefinition, AgentFailed
from agent_r1_async.envs.base import EnvError, Task
from agent_r1_async.envs.blackbox import BlackboxEnv
from agent_r1_async.envs.registry import get_env_spec, list_envs

AGENTS = "tests.unit.actors.endpoint.agents"


def spec(**args):
    args = {"agent": f"{AGENTS}:makes_no_call", "tasks": f"{AGENTS}:tasks", **args}
    return get_env_spec(EnvConfig(name="blackbox", max_turns=3, step_timeout_s=20.0, args=args))


def test_blackbox_is_a_builtin_and_an_agent_definition():
    assert "blackbox" in dict(list_envs())
    s = spec()
    assert isinstance(s.definition, BlackboxEnv) and isinstance(s.definition, AgentDefinition)
    assert s.definition.timeout_s == 60.0  # env.step_timeout_s x env.max_turns
    assert spec(timeout_s=5).definition.timeout_s == 5.0


def test_tasks_come_from_the_users_function_as_tasks():
    tasks = spec().tasks("dev")
    assert tasks == [Task("dev-0", "What is 2+2?", 4, {}), Task("dev-1", "What is 3+3?", 6)]


@pytest.mark.parametrize("args, message", [
    ({"agent": "no_colon"}, "config key `env.args.agent`: must be 'module:function'"),
    ({"timeout_s": -1}, "config key `env.args.timeout_s`: must be >= 0"),
    ({"agent_args": {"api_key": "x"}}, "config key `env.args.agent_args`: 'api_key' is passed "
                                       "by the actor"),
    ({"nope": 1}, "unknown config key `env.args.nope`"),
    ({"agent": f"{AGENTS}:missing"}, f"config key `env.args.agent`: cannot import "
                                     f"'{AGENTS}:missing'"),
    ({"tasks": "no_such_module_xyz:tasks"}, "config key `env.args.tasks`: cannot import"),
    ({"agent": "math:nan"}, "config key `env.args.agent`: 'math:nan' is not callable"),
    ({"agent_args": {"reward": 1.0}}, f"config key `env.args.agent`: {AGENTS}:makes_no_call "
                                      "cannot be called as run(task, base_url, reward=..., "
                                      "api_key=...)"),
])
def test_bad_args_name_their_key(args, message):
    with pytest.raises(ConfigError) as err:
        spec(**args)
    assert str(err.value).startswith(message), str(err.value)


def test_the_optional_keywords_an_agent_declares_are_the_ones_passed():
    s = spec(agent=f"{AGENTS}:two_turns", agent_args={"reward": 0.25})
    assert s.definition.optional == ("api_key",) and s.definition.credential == "session"
    keyless = spec(agent=f"{AGENTS}:takes_no_key").definition
    assert keyless.optional == () and keyless.credential == "none"


def test_run_agent_gives_the_reward_or_an_agent_failure_naming_the_agent():
    ok = spec().definition
    assert asyncio.run(ok.run_agent(Task("t", "q"), "http://127.0.0.1:9/v1", "k", "s")) == 1.0
    failing = spec(agent=f"{AGENTS}:raises_after_one_call").definition
    with pytest.raises(AgentFailed) as err:  # its call cannot connect: the client raises
        asyncio.run(failing.run_agent(Task("t", "q"), "http://127.0.0.1:9/v1", "k", "s"))
    assert err.value.message.startswith(
        f"agent {AGENTS}:raises_after_one_call raised APIConnectionError: ")
    assert (err.value.kind, err.value.status) == ("APIConnectionError", "env_error")


def test_an_episode_outside_an_endpoint_fails_in_one_line():
    env = spec().make()
    with pytest.raises(EnvError, match=r"env 'blackbox' \(tests.unit.actors.endpoint.agents:"
                                       r"makes_no_call\) plays its episodes only through a "
                                       r"generation endpoint"):
        asyncio.run(env.reset(Task("t", "q")))

"""The `openenv` env's `env.args` and what derives from them alone (no server): each bad
value is a ConfigError naming its key, the command's port, the auth headers, the tasks of a
split and their reset keywords. Live servers: tests/integration/test_openenv_live.py."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.openenv.env import OpenEnvEnv, reset_kwargs, split_tasks
from agent_r1_async.envs.registry import list_envs, parse_args

CMD = ["python", "srv.py", "--port", "{port}"]
TASKS = {"train": {"seed_range": [0, 3]}, "dev": {"seeds": [10, 11], "prompts": ["hi"]}}


def args(**kw: Any):
    return parse_args(OpenEnvEnv, {"command": CMD, "tasks": TASKS, **kw})


def test_defaults():
    a = args()
    assert (a.name, a.action_field, a.observation_field, a.outcome) == \
        ("openenv", "message", "message", "last")
    assert (a.start_timeout_s, a.connect_timeout_s, a.timeout_s, a.restarts,
            a.max_idle_sessions) == (60.0, 10.0, 30.0, 3, 64)
    assert a.label == "OpenEnv server 'openenv' (python srv.py --port {port})"


@pytest.mark.parametrize(("kw", "message"), [
    ({"command": []}, "config key `env.args.command`: give exactly one of command (a local "
                      "server) and url"),
    ({"url": "http://h:1"}, "config key `env.args.command`: give exactly one of"),
    ({"command": ["python", "srv.py"]}, "config key `env.args.command`: write {port} where "
                                        "the server's port goes"),
    ({"command": [], "url": "ftp://h:1"}, "config key `env.args.url`: must be http(s)://host:port"),
    ({"command": [], "url": "http://"}, "config key `env.args.url`: must be http(s)://host:port"),
    ({"command": [], "url": "http://h:1", "cwd": "/tmp"},
     "config key `env.args.cwd`: is for a command server"),
    ({"name": "a b"}, "config key `env.args.name`: 'a b' must be letters"),
    ({"timeout_s": 0}, "config key `env.args.timeout_s`: must be > 0"),
    ({"start_timeout_s": -1}, "config key `env.args.start_timeout_s`: must be > 0"),
    ({"restarts": -1}, "config key `env.args.restarts`: must be >= 0"),
    ({"action_field": ""}, "config key `env.args.action_field`: must name the Action field"),
    ({"action_extra": {"message": "x"}}, "config key `env.args.action_extra`: sets 'message', "
                                         "the action_field"),
    ({"observation_field": "reward"}, "config key `env.args.observation_field`: must name an "
                                      "Observation field other than reward, done, metadata"),
    ({"metric_fields": ["done"]}, "config key `env.args.metric_fields`: 'done' is not an "
                                  "Observation field the server sends"),
    ({"outcome": "max"}, "config key `env.args.outcome`: Invalid enum value 'max' (one of last, "
                         "sum)"),
    ({"tasks": {}}, "config key `env.args.tasks`: name at least one split"),
    ({"tasks": {"train": {}}}, "config key `env.args.tasks`: split 'train': give seeds, a "
                               "seed_range or prompts"),
    ({"tasks": {"train": {"seed_range": [5, 5]}}},
     "config key `env.args.tasks`: split 'train': seed_range must be [start, stop] with "
     "0 <= start < stop, got [5, 5]"),
    ({"tasks": {"train": {"seeds": [-1]}}}, "split 'train': seeds must be >= 0"),
    ({"tasks": {"train": {"seeds": [2], "seed_range": [0, 3]}}}, "split 'train': a seed repeats"),
    ({"tasks": {"train": {"prompts": ["a", "a"]}}}, "split 'train': a prompt repeats"),
    ({"tasks": {"train": {"seed_range": [0, 10]}, "dev": {"seeds": [9]}}},
     "config key `env.args.tasks`: seed 9 is in both train and dev"),
    ({"tasks": {"train": {"prompts": ["q"]}, "test": {"prompts": ["q"]}}},
     "config key `env.args.tasks`: prompt 'q' is in both train and test"),
    ({"tasks": {"train": {"seedz": [1]}}}, "unknown config key `env.args.tasks[...].seedz`"),
    ({"reset_kwargs": {"seed": 1}}, "config key `env.args.reset_kwargs`: sets 'seed', which "
                                    "each task sets"),
    ({"reset_kwargs": {"question": "x"}, "prompt_kwarg": "question"},
     "config key `env.args.reset_kwargs`: sets 'question'"),
    ({"oracle": "m.f"}, "config key `env.args.oracle`: must be 'module:function'"),
    ({"header_env": {}}, "unknown config key `env.args.header_env`"),
])
def test_bad_args_name_the_key(kw, message):
    with pytest.raises(ConfigError) as err:
        args(**kw)
    assert message in str(err.value)


def test_tasks_are_required():
    with pytest.raises(ConfigError, match=r"Object missing required field `tasks`"):
        parse_args(OpenEnvEnv, {"command": CMD})


def test_the_port_goes_where_the_command_says_and_python_is_this_interpreter():
    a = args(command=["python", "srv.py", "--bind=127.0.0.1:{port}"])
    assert a.argv(4242) == [sys.executable, "srv.py", "--bind=127.0.0.1:4242"]
    assert args(command=["/bin/srv", "{port}"]).argv(7) == ["/bin/srv", "7"]


def test_headers_come_from_the_environment(monkeypatch):
    a = args(command=[], url="https://space.example", headers_env={"Authorization": "OE_TOKEN"})
    monkeypatch.setenv("OE_TOKEN", "Bearer s3cret")
    assert a.headers() == {"Authorization": "Bearer s3cret"}
    monkeypatch.delenv("OE_TOKEN")
    with pytest.raises(ConfigError, match=r"^OpenEnv server 'openenv' \(https://space.example\): "
                                          r"environment variable OE_TOKEN \(header "
                                          r"Authorization\) is not set$"):
        a.headers()


def test_timeouts_must_be_below_the_step_timeout_before_anything_starts(monkeypatch):
    cfg = EnvConfig(name="openenv", step_timeout_s=20.0, tool_timeout_s=10.0)
    with pytest.raises(ConfigError, match=r"^config key `env.args.timeout_s`: 30 must be below "
                                          r"env.step_timeout_s \(20\)$"):
        OpenEnvEnv(args(), cfg)
    monkeypatch.delenv("OE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="environment variable OE_TOKEN"):
        OpenEnvEnv(args(headers_env={"X-Token": "OE_TOKEN"}), EnvConfig(name="openenv"))


def test_tasks_of_a_split_and_their_reset_keywords():
    a = args(reset_kwargs={"level": 2}, prompt_kwarg="question")
    train = split_tasks(a, "train")
    assert [(t.task_id, t.prompt, t.meta) for t in train] == [
        ("train-seed-0", "seed 0", {"reset": {"seed": 0}}),
        ("train-seed-1", "seed 1", {"reset": {"seed": 1}}),
        ("train-seed-2", "seed 2", {"reset": {"seed": 2}})]
    dev = split_tasks(a, "dev")
    assert [t.task_id for t in dev] == ["dev-seed-10", "dev-seed-11", "dev-prompt-0"]
    assert reset_kwargs(a, dev[0]) == {"level": 2, "seed": 10}
    assert reset_kwargs(a, dev[2]) == {"level": 2, "question": "hi"}
    assert reset_kwargs(a, Task("other", "p")) == {"level": 2}
    with pytest.raises(ConfigError, match=r"^config key `env.args.tasks`: no split 'test' "
                                          r"\(splits: train, dev\)$"):
        split_tasks(a, "test")


def test_listed_as_a_builtin():
    assert dict(list_envs())["openenv"] == ("Environments of an OpenEnv server (a local command "
                                            "or a URL), one WebSocket session per episode.")

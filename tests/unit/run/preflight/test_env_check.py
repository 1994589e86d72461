"""Broken envs fail before Ray starts, in one line naming env, method and
exception; `envs check` reports an env on one screen; `config show` checks `env.args`.

Each broken definition below is one a new user writes. Without the preflight, `launch` finds
these only inside the actors (after three restarts, as a doubled traceback), `eval` prints
`failed_rate 1`, and `config show --set env.args.bogus=1` exits 0.
"""

from __future__ import annotations

import pytest

from agent_r1_async.cli import main
from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.arithmetic import ArithmeticEnv
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.run.preflight.checks import preflight

HERE = __name__  # this module (tests.unit.run.preflight.test_env_check), importable as `HERE:Class`


class NoMake:
    def __init__(self, args, env_cfg) -> None:
        pass

    def tasks(self, split: str) -> list[Task]:
        return [Task("t0", "q"), Task("t1", "q")]


class JunkMake(NoMake):
    def make(self) -> str:
        return "not an env"


class NoTasks(ArithmeticEnv):
    def tasks(self, split: str) -> list[Task]:
        return []


class OneTask(ArithmeticEnv):
    def tasks(self, split: str) -> list[Task]:
        return super().tasks(split)[:1]


class WrongConstructor:
    def __init__(self, args) -> None:  # missing env_cfg
        pass


class _FailingStep:
    async def reset(self, task: Task) -> Observation:
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        raise KeyError("metres")


class FailingStep(ArithmeticEnv):
    def make(self) -> _FailingStep:
        return _FailingStep()


def _cfg(name: str, **extra) -> object:
    return config_from_dict({"model": {"name_or_path": "tiny-random-llama"},
                             "engine": {"backend": "hf"}, "env": {"name": name, **extra},
                             "actors": {"num_actors": 2}})


@pytest.mark.parametrize(("name", "extra", "message"), [
    ("no_such_module_xyz:Env", {}, "env.name: cannot import 'no_such_module_xyz:Env': "
                                   "No module named 'no_such_module_xyz'"),
    ("no_such_env", {}, "env.name: unknown env 'no_such_env'; known envs: arithmetic, "),
    ("arithmetic", {"args": {"bogus": 1}}, "unknown config key `env.args.bogus`"),
    (f"{HERE}:WrongConstructor", {}, f"env '{HERE}:WrongConstructor': "
     "WrongConstructor(args, env_cfg) failed: TypeError: "),
    (f"{HERE}:NoMake", {}, f"env '{HERE}:NoMake': make() failed: AttributeError: "),
    (f"{HERE}:JunkMake", {}, f"env '{HERE}:JunkMake': make() failed: EnvError: "
     f"{HERE}:JunkMake: make() returned str, not an Env"),
    (f"{HERE}:NoTasks", {}, f"env '{HERE}:NoTasks': tasks('train') returned 0 tasks; "
     "it needs at least 2 tasks (one per actor)"),
    (f"{HERE}:OneTask", {}, f"env '{HERE}:OneTask': tasks('train') returned 1 tasks; "
     "it needs at least 2 tasks (one per actor)"),
])
def test_launch_preflight_names_env_method_and_exception(name, extra, message, capsys):
    cfg = _cfg(name, **extra)
    with pytest.raises(Exception) as info:
        preflight(cfg)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_eval_and_sft_stop_on_a_broken_env_in_one_line_before_loading_anything(capsys,
                                                                                monkeypatch):
    import agent_r1_async.run.evaluate
    import agent_r1_async.run.sft

    loaded: list[str] = []  # what loads the model (and everything else) for each command
    monkeypatch.setattr(agent_r1_async.run.evaluate, "evaluate",
                        lambda *a, **k: loaded.append("eval"))
    monkeypatch.setattr(agent_r1_async.run.sft, "run_sft", lambda *a, **k: loaded.append("sft"))
    for argv in (["eval"], ["sft"]):
        rc = main([*argv, "--set", f"env.name={HERE}:NoMake", "--set", "engine.backend=hf",
                   "--set", "model.name_or_path=tiny-random-llama"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.count("\n") == 0, err
        assert err.endswith(f"env '{HERE}:NoMake': make() failed: AttributeError: "
                            "'NoMake' object has no attribute 'make'")
    assert loaded == []  # stopped by the preflight, before either began


def test_config_show_checks_env_args(capsys):
    assert main(["config", "show", "--set", "env.name=arithmetic", "--set", "env.args.bogus=1"]) == 2
    assert "unknown config key `env.args.bogus`" in capsys.readouterr().err


def test_envs_check_reports_the_oracle_episode_on_one_screen(capsys):
    assert main(["envs", "check", "arithmetic", "--split", "dev"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "env arithmetic" and out[-1] == "OK" and len(out) <= 24
    assert out[1] == "  import  agent_r1_async.envs.arithmetic:ArithmeticEnv"
    assert out[4].startswith("  tasks   dev: 200 (first: arith-dev-0: ")
    # The oracle calls the calculator (process 0.1 valid call + 0.2 correct result), answers
    # right (outcome 1); the junk action ends the episode with outcome 0.
    assert out[5].startswith("  oracle  arith-dev-0: reset ")
    assert "done, process 0.3, outcome 1 (success 1," in out[5]
    assert out[6].startswith("  junk    arith-dev-0: ") and "outcome 0 (success 0," in out[6]


def test_envs_check_names_the_failing_method(capsys):
    assert main(["envs", "check", f"{HERE}:FailingStep", "--split", "dev"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "FAILED"
    assert out[5] == "  oracle  arith-dev-0: FAILED: env.step raised KeyError: 'metres'"
    assert main(["envs", "check", f"{HERE}:NoTasks", "--split", "dev"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (f"  FAILED  env '{HERE}:NoTasks': tasks('dev') returned 0 tasks; "
                       "it needs at least one task")


def test_envs_check_lists_an_endpoint_envs_tasks_and_does_not_step_them(capsys):
    assert main(["envs", "check", "--config", "configs/blackbox_example.yaml",
                 "--split", "dev"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "env blackbox" and out[-1] == "OK"
    assert out[4].startswith("  tasks   dev: 200 (first: arith-dev-0: ")
    assert out[5] == ("  episodes  not stepped here: its agent plays them through a generation "
                      "endpoint (`eval` plays them with a model)")

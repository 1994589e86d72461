"""`envs check world` passes with the default config: the world's suggested `env.max_turns`
replaces the default config's 3 (another env's), and the oracle episode solves the world."""

from __future__ import annotations

from agent_r1_async.cli import main
from agent_r1_async.config import EnvConfig
from agent_r1_async.run.preflight.env_check import named_env


def test_envs_check_world_passes_with_the_default_config(capsys):
    assert main(["envs", "check", "world", "--split", "dev"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "env world" and out[-1] == "OK"
    assert out[1] == ("  turns   env.max_turns 64 (the env's suggestion; the config's 3 is "
                      "for arithmetic)")
    oracle = next(line for line in out if line.startswith("  oracle  world-dev-0: "))
    assert "done, process 1, outcome 1 (success 1, optimal_len " in oracle


def test_named_env_raises_max_turns_only_for_another_envs_config():
    base = EnvConfig(name="arithmetic", max_turns=3)
    assert named_env(base, "world").max_turns == 64  # medium: the default horizon
    xlong = EnvConfig(name="arithmetic", max_turns=3, args={"horizon": "xlong"})
    assert named_env(xlong, "world").max_turns == 320
    roomy = EnvConfig(name="arithmetic", max_turns=500)
    assert named_env(roomy, "world").max_turns == 500  # never lowered
    own = EnvConfig(name="world", max_turns=7)
    assert named_env(own, "world") is own  # the config's own env: as written
    assert named_env(base, "python_tool").max_turns == 3  # no suggestion
    assert named_env(base, "no_such_env").name == "no_such_env"  # check_env reports it

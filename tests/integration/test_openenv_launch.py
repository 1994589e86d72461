"""`envs check` passes on the shipped OpenEnv config and names a server that does not start,
the launch's preflight names it too, and a tiny launch trains end to end on the example
OpenEnv server (every process starts the real server; nothing is mocked)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli_runs import CLI, ROOT, cli_env, launch_ok, tiny_config_with_env


def test_envs_check_passes_on_the_openenv_example():
    out = subprocess.run([*CLI, "envs", "check", "--config", "configs/openenv_example.yaml"],
                         capture_output=True, text=True, timeout=300, env=cli_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK"
    oracle = [ln for ln in lines if ln.strip().startswith("oracle")]
    assert len(oracle) == 2 and all("outcome 1 (solved 1, return" in ln for ln in oracle)
    junk = [ln for ln in lines if ln.strip().startswith("junk")]
    assert len(junk) == 2 and all("done, process -0.4, outcome 0 (solved 0" in ln for ln in junk)


def test_envs_check_names_a_server_that_does_not_start():
    out = subprocess.run(
        [*CLI, "envs", "check", "--config", "configs/openenv_example.yaml",
         "--set", "env.args.command=[python, examples/nope.py, '{port}']"],
        capture_output=True, text=True, timeout=300, env=cli_env(), cwd=ROOT)
    assert out.returncode != 0
    failed = [ln for ln in out.stdout.splitlines() if "FAILED" in ln]
    assert len(failed) == 1, out.stdout + out.stderr
    assert ("OpenEnv server 'guess' (python examples/nope.py {port}) did not start: it exited "
            "with code 2; output: ") in failed[0]
    assert "nope.py" in failed[0].split("output: ")[-1]  # python's own "can't open file"


def test_launch_preflight_names_a_server_that_does_not_start():
    from agent_r1_async.config import ConfigError, config_from_dict
    from agent_r1_async.run.preflight.checks import preflight

    cfg = config_from_dict({
        "model": {"name_or_path": "tiny-random-llama"}, "engine": {"backend": "hf"},
        "actors": {"num_actors": 2},
        "env": {"name": "openenv", "args": {
            "name": "guess", "command": ["python", "-c", "raise SystemExit(3)", "{port}"],
            "tasks": {"train": {"seed_range": [0, 10]}, "dev": {"seed_range": [10, 20]}}}}})
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    assert str(err.value) == ("OpenEnv server 'guess' (python -c raise SystemExit(3) {port}) did "
                              "not start: it exited with code 3")


@pytest.mark.slow
def test_tiny_launch_trains_on_the_openenv_example(tmp_path: Path):
    """Three updates on the guess server; the buffer's step records (its snapshot at stop)
    hold the server's replies in the next step's context and its rewards, exactly as the
    game played here on the decoded actions gives them."""
    from agent_r1_async.buffers.snapshot import load_snapshot
    from agent_r1_async.models import load_tokenizer, tiny_model_dir
    from examples.openenv_guess_server import Game, secret_for

    config = tiny_config_with_env(tmp_path, "openenv_example.yaml", "tiny-openenv")
    run_dir, _ = launch_ok("--config", str(config), timeout=600)
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:  # the episodes ran on the OpenEnv env, none failed on it
        assert "reward/env/openenv" in r and "reward/process_step_0" in r and "env/solved" in r
        assert not r.get("episodes/status/env_error") and not r.get("episodes/status/timeout")

    state = load_snapshot(str(run_dir / "buffer"))
    assert state is not None
    groups = [s.group for s in state.stored]
    episodes = [ep for g in groups for ep in g.episodes]
    assert episodes and all(g.env_name == "openenv" for g in groups)
    tok = load_tokenizer(tiny_model_dir())
    for ep in episodes:
        seed = int(ep.steps[0].task_id.removeprefix("train-seed-"))
        game = Game(secret_for(seed))
        assert tok.decode(list(ep.steps[0].context_ids)).endswith(
            f"<|im_start|>user\n{game.intro()}<|im_end|>\n<|im_start|>assistant\n")
        for i, step in enumerate(ep.steps):
            action = tok.decode(list(step.action_ids), skip_special_tokens=True)
            reply, reward, done = game.play(action)
            if done:  # the server ended it: the reward is the outcome
                assert (step.process_reward, ep.end.outcome_reward) == (0.0, reward)
                break
            assert step.process_reward == pytest.approx(reward)
            if i + 1 < len(ep.steps):
                assert f"<|im_start|>user\n{reply}<|im_end|>" in tok.decode(
                    list(ep.steps[i + 1].context_ids))

"""A verifiers environment defined in the tests (tests/integration/vf_envs/vf_echo.py) trains
in a tiny launch (configs/tiny.yaml with configs/verifiers_example.yaml's env): each actor
starts verifiers' EnvServer from the verifiers venv, and every step record the buffer holds
is a call verifiers' harness made through its interception proxy: its action ids, context ids
and log-probs are the ones the endpoint returned (the harness logged them), one policy
version per token, and the episode's outcome is the taskset's score of the last reply."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agent_r1_async.wire.delta import resolve_contexts
from tests.integration.agent_calls import buffered_episodes, logged_calls
from tests.integration.cli_runs import launch_ok, tiny_config_with_env
from tests.integration.vf_setup import needs_verifiers, vf_env

pytestmark = needs_verifiers


def test_a_verifiers_env_trains_in_a_tiny_launch_token_exact(tmp_path: Path):
    config = tiny_config_with_env(tmp_path, "verifiers_example.yaml", "tiny-verifiers")
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    cfg = yaml.safe_load(config.read_text())
    cfg["env"] = vf_env(str(log_dir))
    cfg["actors"]["num_actors"] = 1  # one actor (and one EnvServer) on a 2-core machine
    # groups stay admissible to the end, so the final buffer snapshot still holds some of them
    cfg["buffer"]["max_staleness"] = 3
    config.write_text(yaml.safe_dump(cfg))
    run_dir, _ = launch_ok("--config", str(config), timeout=300)

    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:
        assert "reward/env/verifiers" in r and r.get("env/vf_calls") == 2.0
        assert not r.get("episodes/status/env_error") and not r.get("episodes/status/timeout")

    calls = logged_calls(log_dir)
    episodes = buffered_episodes(run_dir, "verifiers")
    for ep in episodes:
        assert [s.step_index for s in ep.steps] == [0, 1] and ep.end.status == "ok"
        contexts = resolve_contexts(ep.steps)  # the buffer keeps delta records as sent
        for step, context in zip(ep.steps, contexts, strict=True):
            call = calls[ep.end.episode_id, step.step_index]
            assert list(step.action_ids) == call["token_ids"]
            assert list(context) == call["prompt_token_ids"]
            assert list(step.behavior_logprobs) == call["logprobs"]
            versions = list(step.token_versions) or [step.policy_version] * len(step.action_ids)
            assert versions == call["token_versions"]
        last = calls[ep.end.episode_id, 1]["content"].strip()  # verifiers scores last_reply
        assert ep.end.outcome_reward == float(len(last) % 2)

"""A black-box agent written with the `openai` client (tests/integration/blackbox_agent.py)
trains end to end in a tiny launch (configs/tiny.yaml with configs/blackbox_example.yaml's
env): the run finishes its updates, and every step record the buffer holds is a call the
agent made: its action ids are the ids the endpoint returned to the agent, they decode to
the text the agent read, its context is the prompt the engine saw, and the second turn's
context extends the first turn's context and action token for token."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agent_r1_async.wire.delta import resolve_contexts
from tests.integration.agent_calls import buffered_episodes, logged_calls
from tests.integration.cli_runs import launch_ok, tiny_config_with_env


def test_an_openai_agent_trains_end_to_end_through_the_endpoint(tmp_path: Path):
    from agent_r1_async.models import load_tokenizer, tiny_model_dir

    config = tiny_config_with_env(tmp_path, "blackbox_example.yaml", "tiny-blackbox")
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    cfg = yaml.safe_load(config.read_text())
    cfg["env"]["args"] = {"agent": "tests.integration.blackbox_agent:run",
                          "tasks": "examples.openai_agent:tasks",
                          "agent_args": {"log_dir": str(log_dir)}}
    cfg["actors"]["num_actors"] = 1  # one actor keeps the launch light on a 2-core machine
    config.write_text(yaml.safe_dump(cfg))
    run_dir, _ = launch_ok("--config", str(config), timeout=300)

    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]  # tiny.yaml: learner.total_updates 3
    for r in rows:
        assert "reward/env/blackbox" in r and r.get("env/calls") == 2.0
        assert not r.get("episodes/status/env_error") and not r.get("episodes/status/timeout")

    calls = logged_calls(log_dir)
    episodes = buffered_episodes(run_dir, "blackbox")
    tok = load_tokenizer(tiny_model_dir())
    for ep in episodes:
        assert [s.step_index for s in ep.steps] == [0, 1] and ep.end.status == "ok"
        contexts = resolve_contexts(ep.steps)  # the buffer keeps delta records as sent
        for step, context in zip(ep.steps, contexts, strict=True):
            call = calls[ep.end.episode_id, step.step_index]
            assert list(step.action_ids) == call["token_ids"]
            assert list(context) == call["prompt_token_ids"]
            assert list(step.behavior_logprobs) == call["logprobs"]
            assert tok.decode(list(step.action_ids), skip_special_tokens=True) == call["content"]
        first, second = ep.steps
        prefix = [*contexts[0], *first.action_ids]
        assert list(contexts[1][:len(prefix)]) == prefix
        # the second call extends the first: it travelled as a delta of the appended tokens
        assert second.context_from == 0 and list(second.context_ids) == list(
            contexts[1][len(prefix):])
        assert ep.end.outcome_reward == float(len(calls[ep.end.episode_id, 1]["content"]) % 2)

"""The `verifiers` env against a real verifiers EnvServer (the verifiers venv, its own
process) and the actor's real endpoint on one event loop: the test-defined env
(tests/integration/vf_envs/vf_echo.py) plays a group through verifiers' harness and
interception proxy, and every model call becomes a step record whose ids, log-probs and
per-token versions are the ones the engine sampled; each way the server or the taskset can
fail ends the episode with one line and never hangs the actor."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_r1_async.actors.endpoint.episodes import BlackboxRunner
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.actors.runner import open_runner
from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.messages import EpisodeEnd, StepRecord, decode_data, encode
from tests.fakes.engine import FakeEngine
from tests.integration.agent_calls import logged_calls
from tests.integration.vf_setup import needs_verifiers, vf_env

pytestmark = needs_verifiers
IM_END = 2


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


def play(tok: Any, engine: Any, env: dict[str, Any], group: int, rounds: int = 1,
         ) -> tuple[list[EpisodeEnd], list[StepRecord]]:
    """`rounds` x `group` episodes of the first train task (a round after the last); their
    ends and every step record as the wire decodes it."""
    cfg = config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": "hf", "max_new_tokens": 16}, "env": env})
    spec = get_env_spec(cfg.env)
    rollout = Rollout.from_config(cfg, engine, tok, spec.name, "actor-0")
    task = spec.tasks("train")[0]
    sent: list[Any] = []

    async def emit(msg: Any) -> None:
        sent.append(decode_data(encode(msg)))

    async def main() -> list[EpisodeEnd]:
        runner = await open_runner(cfg, spec, rollout, None, 0)
        assert isinstance(runner, BlackboxRunner)
        ends: list[EpisodeEnd] = []
        try:
            for r in range(rounds):
                ends += await asyncio.gather(*(
                    runner.run(task, EpisodeIds.fresh(f"g-{r}", group), emit)
                    for _ in range(group)))
        finally:
            await runner.close()
            await spec.definition.aclose()
        return ends

    ends = asyncio.run(main())
    return ends, [m for m in sent if isinstance(m, StepRecord)]


def test_a_verifiers_group_becomes_step_records_of_the_sampled_tokens(tok, tmp_path: Path):
    replies = [[*tok.encode("Red.", add_special_tokens=False), IM_END],
               [*tok.encode("Blue!", add_special_tokens=False), IM_END]]
    engine = FakeEngine.scripted([replies[i % 2] for i in range(4)])  # 2 episodes x 2 calls
    ends, records = play(tok, engine, vf_env(str(tmp_path)), group=2)
    assert [e.status for e in ends] == ["ok", "ok"], [e.error for e in ends]
    calls = logged_calls(tmp_path)
    assert len(calls) == 4 == len(records)
    for end in ends:
        steps = sorted((r for r in records if r.episode_id == end.episode_id),
                       key=lambda r: r.step_index)
        assert [(s.step_index, s.done) for s in steps] == [(0, False), (1, True)]
        for s in steps:
            call = calls[end.episode_id, s.step_index]
            assert s.action_ids.tolist() == call["token_ids"]
            assert s.context_ids.tolist() == call["prompt_token_ids"]
            assert s.behavior_logprobs.tolist() == pytest.approx(call["logprobs"], abs=0)
            # per token: one version for the whole action (an empty list on the wire)
            assert call["token_versions"] == [0] * len(call["token_ids"])
            assert (s.policy_version, s.token_versions) == (0, [])
            assert s.env_name == "verifiers" and s.task_id == "echo-0"
        first, second = steps
        assert second.context_ids.tolist()[:len(first.context_ids) + len(first.action_ids)] \
            == [*first.context_ids.tolist(), *first.action_ids.tolist()]
        last = calls[end.episode_id, 1]["content"]
        # the reward is verifiers' own score: len(last reply) % 2 ("Red." -> 0, "Blue!" -> 1)
        assert end.outcome_reward == float(len(last) % 2)
        assert end.metrics == {"parity": end.outcome_reward, "vf_calls": 2.0, "calls": 2.0,
                               "divergences": 0.0}


@pytest.mark.parametrize("mode, status, error", [
    ("exit", "env_error", "verifiers EnvServer (vf-echo) exited with code 3"),
    pytest.param("no_call", "env_error",
                 "agent verifiers taskset vf-echo made no generation call",
                 marks=pytest.mark.slow),
    pytest.param("bad_reward", "env_error",
                 "TaskError: task VfEchoTask scoring: ValueError: this reward always fails",
                 marks=pytest.mark.slow),
])
def test_a_failing_server_or_taskset_fails_its_episode_in_one_line(tok, mode, status, error):
    engine = FakeEngine.repeating([*tok.encode("Red.", add_special_tokens=False), IM_END])
    rounds = 2 if mode == "exit" else 1  # a dead server is started again for the next round
    ends, _ = play(tok, engine, vf_env(mode=mode), group=1, rounds=rounds)
    assert len(ends) == rounds  # every round ended (a hang would end in pytest's timeout)
    for end in ends:
        assert end.status == status and end.error.startswith(error), end.error
        assert "\n" not in end.error and end.outcome_reward == 0.0


def test_an_episode_past_its_timeout_is_cancelled_on_time(tok):
    engine = FakeEngine.repeating([*tok.encode("Red.", add_special_tokens=False), IM_END])
    env = vf_env(mode="sleep", timeout_s=2.0)
    ends, _ = play(tok, engine, env, group=2)
    # Cut by env.args.timeout_s, not after the harness's hour (which pytest's timeout would
    # end first): the reason says so.
    assert [e.status for e in ends] == ["timeout", "timeout"]
    assert ends[0].error == "verifiers taskset vf-echo: the episode took longer than 2 s " \
                            "(env.args.timeout_s)"


def test_eval_plays_a_verifiers_env_through_an_endpoint_of_its_own(tmp_path: Path):
    from agent_r1_async.run.evaluate import evaluate

    cfg = config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": "hf", "max_new_tokens": 8}, "env": vf_env(str(tmp_path))})
    result = evaluate(cfg, "dev", 2)
    lasts = [c["content"].strip() for (_, step), c in logged_calls(tmp_path).items() if step == 1]
    assert len(lasts) == 2 and result["episodes"] == 2.0 and result["failed_rate"] == 0.0
    # the taskset's score of each last reply, averaged: what the evaluation reports
    assert result["outcome_reward"] == sum(len(t) % 2 for t in lasts) / 2
    assert result["parity"] == result["outcome_reward"] and result["vf_calls"] == 2.0

"""evaluate(): the rollout code on held-out tasks; an oracle scores 1, junk scores 0."""

from __future__ import annotations

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.evaluate import evaluate, format_table
from tests.fakes.engine import FakeEngine


@pytest.fixture(scope="module")
def cfg():
    return config_from_dict({
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 1024},
        "env": {"name": "arithmetic", "max_turns": 3},
        "eval": {"samples_per_task": 2},
    })


def test_oracle_engine_scores_perfectly(cfg):
    spec = get_env_spec(cfg.env)
    tasks = spec.tasks("dev")[:4]
    oracles = {t.prompt: spec.oracle(t) for t in tasks}
    engine = FakeEngine.by_turn(load_tokenizer(tiny_model_dir()), oracles)
    rows: list = []
    result = evaluate(cfg, "dev", 4, engine=engine, episodes=rows)
    assert result["episodes"] == 8.0  # 4 tasks x 2 samples
    # one row per episode: each task twice, each solved with return 1.3 in its oracle's steps
    assert sorted(r["task_id"] for r in rows) == sorted([t.task_id for t in tasks] * 2)
    by_task = {t.task_id: len(spec.oracle(t)) for t in tasks}
    for r in rows:
        assert (r["status"], r["outcome_reward"], r["steps"]) == ("ok", 1.0, by_task[r["task_id"]])
        assert r["return"] == pytest.approx(1.3) and r["metrics"]["format_ok"] == 1.0
    assert result["outcome_reward"] == 1.0 and result["failed_rate"] == 0.0
    assert result["format_ok"] == 1.0
    # return = outcome 1.0 + process rewards: first valid calculator call 0.1, a calculator
    # result equal to the gold answer 0.2 (the oracle's call computes exactly the answer)
    assert result["mean_return"] == pytest.approx(1.3)
    assert result["valid_tool_call_rate"] == 1.0
    oracle_steps = sum(len(spec.oracle(t)) for t in tasks) / 4
    assert result["mean_steps"] == pytest.approx(oracle_steps)


def test_junk_engine_scores_zero(cfg):
    result = evaluate(cfg, "dev", 3, engine=FakeEngine.repeating([28, 29, 30]))
    assert result["outcome_reward"] == 0.0 and result["episodes"] == 6.0
    assert result["mean_return"] == 0.0
    assert result["mean_action_tokens"] == 3.0  # every action is the 3 scripted tokens


def test_format_table_aligns_columns():
    table = format_table([{"model": "a", "em": 0.5}, {"model": "bb", "f1": 1.0}])
    assert table.splitlines() == [
        "model      em  f1",
        "-----  ------  --",
        "    a  0.5000   -",
        "   bb       -   1",
    ]


def test_episodes_run_at_most_concurrency_at_once():
    import asyncio

    from agent_r1_async.run.evaluate import run_episodes
    from agent_r1_async.wire.messages import EpisodeEnd

    peak, now = [0], [0]

    class Runner:
        async def run(self, task, ids, emit):
            now[0] += 1
            peak[0] = max(peak[0], now[0])
            await asyncio.sleep(0)  # every other episode gets the loop here
            await asyncio.sleep(0)
            now[0] -= 1
            end = EpisodeEnd(ids.episode_id, ids.group_id, task.task_id, "eval", "fake", 1,
                             1.0, "ok", 1)
            await emit(end)
            return end

    tasks = [type("T", (), {"task_id": f"t{i}"})() for i in range(10)]
    for cap, want in ((3, 3), (0, 20)):  # 0: every episode at once (10 tasks x 2 samples)
        peak[0] = 0
        result = asyncio.run(run_episodes(Runner(), tasks, 2, concurrency=cap))
        assert result["episodes"] == 20.0 and peak[0] == want


def test_eval_concurrency_defaults_to_one_actors_training_load():
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.evaluate import eval_concurrency

    cfg = config_from_dict({"actors": {"groups_in_flight": 4}, "algorithm": {"group_size": 8}})
    assert eval_concurrency(cfg) == 32
    cfg = config_from_dict({"eval": {"concurrency": 5}})
    assert eval_concurrency(cfg) == 5


def test_with_text_rows_carry_the_last_context_and_action_decoded(cfg):
    tok = load_tokenizer(tiny_model_dir())
    spec = get_env_spec(cfg.env)
    tasks = spec.tasks("dev")[:2]
    oracles = {t.prompt: spec.oracle(t) for t in tasks}
    rows: list = []
    evaluate(cfg, "dev", 2, engine=FakeEngine.by_turn(tok, oracles), episodes=rows,
             with_text=True)
    assert len(rows) == 4
    for r in rows:
        task = next(t for t in tasks if t.task_id == r["task_id"])
        text = r["text"]
        # the whole episode up to its last action: the task's question, then every oracle
        # action in order, the last one (and the end token it sampled) at the very end
        assert task.prompt in text
        actions = oracles[task.prompt]
        at = [text.index(a) for a in actions]
        assert at == sorted(at)
        assert text[text.rindex(actions[-1]):] == actions[-1] + tok.eos_token  # sampled ids
    plain: list = []
    evaluate(cfg, "dev", 1, engine=FakeEngine.by_turn(tok, oracles), episodes=plain)
    assert all("text" not in r for r in plain)


def test_eval_with_text_asks_for_the_rows_file_first(capsys):
    from agent_r1_async.cli import main

    assert main(["eval", "--with-text"]) == 2  # refused before any config or model loads
    assert "give --episodes-out FILE too" in capsys.readouterr().err

"""Bad values an env *returns* fail at the boundary (envs/contract.py), like an env that raises.

One table of bad values (NaN and ±inf rewards, `None` and string rewards, a `done` that is not
a bool, a NaN metric, a message without text, tool schemas that are not a list, a prompt over
`model.max_model_len`) runs through:

- the rollout: the episode ends `env_error` with one line naming the method, the field and
  the value, nothing of it reaches the wire, the failure streak counts it, and the next
  episode on the same rollout runs;
- a real actor (buffer service, tiny tokenizer, scripted engine): it keeps running and
  reports every episode failed, where a `None` reward used to kill it in `float()`;
- `envs check`: exit 1 and the same line, never a traceback.

Then `envs check` on an oracle that does not reach a positive outcome within env.max_turns,
on repeated task ids, and `eval` exiting 1 when every episode failed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

import msgspec
import pytest

from agent_r1_async.actors.actor import Actor
from agent_r1_async.actors.context import FullContext
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.cli import main
from agent_r1_async.config import config_from_dict
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.preflight.env_check import preflight_env
from agent_r1_async.wire.messages import ActorStats, EpisodeEnd, StepRecord, decode_data, encode
from tests.fakes.engine import FakeEngine

HERE = __name__  # this module (tests.unit.envs.test_contract), importable as `HERE:Class`
MAX_MODEL_LEN = 512
LONG = "word " * 600  # 600+ tokens: more than MAX_MODEL_LEN on its own
REAL = "expected a finite real number"

# name -> (StepResult fields the env returns, the error line, env/errors kind). Reset cases
# have no step fields: their env returns the bad observation.
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "nan_outcome": ({"outcome_reward": math.nan},
                    f"env.step: StepResult.outcome_reward is nan, {REAL}", "ValueError"),
    "inf_reward": ({"reward": math.inf}, f"env.step: StepResult.reward is inf, {REAL}",
                   "ValueError"),
    "minus_inf_outcome": ({"outcome_reward": -math.inf},
                          f"env.step: StepResult.outcome_reward is -inf, {REAL}", "ValueError"),
    "none_reward": ({"reward": None}, f"env.step: StepResult.reward is None, {REAL}",
                    "TypeError"),
    "str_reward": ({"reward": "0"}, f"env.step: StepResult.reward is '0' (str), {REAL} "
                   "(a numeric string is not one)", "TypeError"),
    "str_outcome": ({"outcome_reward": "1"}, f"env.step: StepResult.outcome_reward is '1' "
                    f"(str), {REAL} (a numeric string is not one)", "TypeError"),
    "str_done": ({"done": "yes"}, "env.step: StepResult.done is 'yes' (str), expected a bool",
                 "TypeError"),
    "int_done": ({"done": 1}, "env.step: StepResult.done is 1, expected a bool", "TypeError"),
    "nan_metric": ({"metrics": {"em": math.nan}},
                   f"env.step: StepResult.metrics['em'] is nan, {REAL}", "ValueError"),
    "none_content": ({}, "env.reset: Observation.messages[0]['content'] is None, expected a str",
                     "TypeError"),
    "tools_dict": ({}, "env.reset: Observation.tools is {'name': 'calc'} (dict), expected a "
                   "list of tool schema dicts", "TypeError"),
    "long_prompt": ({}, "", "ValueError"),  # the line names the prompt's length: see _expected
}


class BadArgs(msgspec.Struct, forbid_unknown_fields=True):
    bad: str = "nan_outcome"
    oracle: str = "right"
    """right (answers 4), wrong (answers 5), long (thinks twice, then answers 4)."""
    repeat: bool = False


class BadEnv:
    """Answers every action with the table's bad value (or a bad reset observation); without
    one it scores "<answer>4</answer>" 1 and anything else 0, done on an answer."""

    def __init__(self, bad: str) -> None:
        self.bad = bad

    async def reset(self, task: Task) -> Observation:
        content: Any = {"none_content": None, "long_prompt": LONG}.get(self.bad, task.prompt)
        tools: Any = {"name": "calc"} if self.bad == "tools_dict" else []
        return Observation([{"role": "user", "content": content}], tools=tools)

    async def step(self, action: str) -> StepResult:
        answered = "<answer>" in action
        fields: dict[str, Any] = {"reward": 0.0, "done": answered,
                                  "outcome_reward": float("<answer>4</answer>" in action)}
        fields.update(CASES.get(self.bad, ({}, "", ""))[0])
        return StepResult(Observation([] if answered else [{"role": "user", "content": "go on"}]),
                          **fields)


class BadValues:
    """An env definition returning one of the table's bad values (env.args.bad)."""

    Args = BadArgs

    def __init__(self, args: BadArgs, env_cfg: Any) -> None:
        self.args = args

    def make(self) -> BadEnv:
        return BadEnv(self.args.bad)

    def tasks(self, split: str) -> list[Task]:
        ids = [f"{split}-{0 if self.args.repeat else i}" for i in range(4)]
        return [Task(task_id, "What is 2+2?", answer="4") for task_id in ids]

    def oracle(self, task: Task) -> list[str]:
        return {"right": ["<answer>4</answer>"], "wrong": ["<answer>5</answer>"],
                "long": ["Let me think.", "Still thinking.", "<answer>4</answer>"]}[self.args.oracle]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_model_dir())


def _expected(case: str, tokenizer: Any, task_id: str) -> str:
    if case != "long_prompt":
        return CASES[case][1]
    # The first context is the chat template's rendering of the reset messages plus the
    # generation prompt: what apply_chat_template gives for the whole conversation.
    text = tokenizer.apply_chat_template([{"role": "user", "content": LONG}], tokenize=False,
                                         add_generation_prompt=True)
    n = len(tokenizer.encode(text, add_special_tokens=False))
    assert n > MAX_MODEL_LEN
    return (f"env.reset: the prompt of task {task_id!r} is {n} tokens, which leaves no room "
            f"for an action in model.max_model_len={MAX_MODEL_LEN}")


def _rollout(tokenizer: Any, engine: FakeEngine) -> Rollout:
    return Rollout(engine=engine, tokenizer=tokenizer, builder=FullContext(), env_name="bad",
                   actor_id="a0", max_model_len=MAX_MODEL_LEN, max_turns=2, step_timeout_s=5.0)


def _run(rollout: Rollout, env: BadEnv, task: Task) -> tuple[EpisodeEnd, list]:
    sent: list = []

    async def emit(msg) -> None:
        sent.append(decode_data(encode(msg)))  # everything emitted survives the wire

    end = asyncio.run(rollout.run(env, task, EpisodeIds.fresh("g1", 1), emit))
    return end, sent


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_value_fails_its_episode_as_env_error_naming_the_field(case, tokenizer):
    answer = tokenizer.encode("<answer>4</answer>", add_special_tokens=False)
    rollout = _rollout(tokenizer, FakeEngine.repeating([*answer, tokenizer.eos_token_id]))
    task = Task("dev-0", "What is 2+2?", answer="4")
    end, sent = _run(rollout, BadEnv(case), task)
    expected = _expected(case, tokenizer, "dev-0")
    assert (end.status, end.error) == ("env_error", expected)
    # Nothing of the bad step reached the wire: the end record alone, with no reward in it.
    assert [type(m).__name__ for m in sent] == ["EpisodeEnd"]
    assert (end.num_steps, end.outcome_reward, end.metrics) == (0, 0.0, {})
    c = rollout.counters
    assert dict(c.env_errors) == {CASES[case][2]: 1}
    assert (c.episodes_failed, c.failed_streak) == (1, 1)  # counts toward the launch's stop
    assert c.last_error == f"env_error in env bad (task dev-0): {expected}"
    # The same rollout goes on: a good episode after the bad one ends ok with outcome 1.
    good, sent = _run(rollout, BadEnv("none"), task)
    assert (good.status, good.outcome_reward, good.num_steps) == ("ok", 1.0, 1)
    assert [type(m).__name__ for m in sent] == ["StepRecord", "EpisodeEnd"]
    assert (c.episodes_done, c.failed_streak) == (1, 0)


def test_a_metric_name_that_is_not_a_string_is_refused(tokenizer):
    class IntMetricName(BadEnv):
        async def step(self, action: str) -> StepResult:
            return StepResult(Observation([]), 0.0, True, outcome_reward=1.0, metrics={3: 1.0})

    end, sent = _run(_rollout(tokenizer, FakeEngine.repeating([28])), IntMetricName("none"),
                     Task("t", "q"))
    assert end.error == "env.step: a name in StepResult.metrics is 3, expected a non-empty str"
    assert len(sent) == 1


@pytest.mark.parametrize("case", ["none_reward", "nan_outcome"])
def test_the_actor_survives_an_env_that_only_returns_bad_values(case, tokenizer):
    from tests.fakes.services import actor_config, buffer_service
    from tests.fakes.transport import RecordingTransport

    cfg = actor_config("hf")
    cfg.model.name_or_path = tiny_model_dir()
    cfg.env.name, cfg.env.args = f"{HERE}:BadValues", {"bad": case}
    transport = RecordingTransport()
    sink = transport.puller()
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    answer = tokenizer.encode("<answer>4</answer>", add_special_tokens=False)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint, None,
                  FakeEngine.repeating([*answer, tokenizer.eos_token_id]))
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    ends: list[EpisodeEnd] = []
    stats: list[ActorStats] = []
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while len(ends) < 4 or not stats or stats[-1].failed_streak < 4:
            assert time.monotonic() < deadline, (len(ends), stats[-1:])
            assert thread.is_alive()  # the actor's loop never died
            frames = sink.recv(100)
            for msg in [] if frames is None else decode_frames(frames):
                if isinstance(msg, StepRecord):
                    raise AssertionError(f"a step of a bad episode was sent: {msg}")
                (ends if isinstance(msg, EpisodeEnd) else stats).append(msg)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(timeout=20)
        credits.stop()
    assert not thread.is_alive()  # and it stops cleanly
    expected = CASES[case][1]
    assert {(e.status, e.error) for e in ends} == {("env_error", expected)}
    last = stats[-1]
    assert last.episodes_done == 0 and last.episodes_failed >= 4
    assert last.env_errors == {CASES[case][2]: last.episodes_failed}
    assert last.last_error.endswith(f"): {expected}")
    assert last.last_error.startswith(f"env_error in env {HERE}:BadValues (task train-")


def decode_frames(frames: list[bytes]) -> list:
    from agent_r1_async.wire.messages import unpack_data

    return list(unpack_data(frames))


# ------------------------------------------------------------------------------ envs check


def _check(*sets: str, name: str = "BadValues") -> int:
    argv = ["envs", "check", f"{HERE}:{name}", "--split", "dev", "--set",
            "model.name_or_path=tiny-random-llama", "--set",
            f"model.max_model_len={MAX_MODEL_LEN}", "--set", "env.max_turns=2"]
    for s in sets:
        argv += ["--set", s]
    return main(argv)


@pytest.mark.parametrize("case", sorted(CASES))
def test_envs_check_fails_on_each_bad_value_in_one_line(case, tokenizer, capsys):
    rc = _check(f"env.args.bad={case}")
    out = capsys.readouterr().out.splitlines()
    expected = _expected(case, tokenizer, "dev-0")
    assert rc == 1 and out[-1] == "FAILED", out
    # The oracle's episode ends on the bad value, in one line (never a traceback); so does
    # the junk one, whose steps are not done, unless only the outcome (read when done) is bad.
    assert f"  oracle  dev-0: FAILED: {expected}" in out
    junk = next(ln for ln in out if ln.startswith("  junk    dev-0: "))
    if "outcome" in case:
        assert junk.endswith(", not done, process 0, outcome 0"), junk
    else:
        assert junk == f"  junk    dev-0: FAILED: {expected}"


def test_envs_check_passes_a_good_env_and_reports_the_prompt_length(tokenizer, capsys):
    assert _check("env.args.bad=none") == 0
    out = capsys.readouterr().out.splitlines()
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                         tokenize=False, add_generation_prompt=True)
    n = len(tokenizer.encode(text, add_special_tokens=False))
    assert out[-1] == "OK"
    assert out[-2] == (f"  prompt  longest {n} tokens (task dev-0) of "
                       f"model.max_model_len={MAX_MODEL_LEN} (tiny-random-llama)")
    assert out[5].startswith("  oracle  dev-0: reset ") and out[5].endswith(
        "done, process 0, outcome 1")


@pytest.mark.parametrize(("oracle", "why"), [
    ("wrong", "the oracle's outcome is 0; it must be positive"),
    ("long", "not done after env.max_turns=2 actions (the oracle has 3); the run would cut "
             "the episode there with outcome 0"),
])
def test_envs_check_fails_when_the_oracle_does_not_succeed_within_max_turns(oracle, why, capsys):
    assert _check("env.args.bad=none", f"env.args.oracle={oracle}") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "FAILED"
    line = next(ln for ln in out if ln.startswith("  oracle  dev-0: "))
    assert line.endswith(f"; FAILED: {why}"), line


def test_repeated_task_ids_fail_envs_check_and_are_warned_about_at_preflight(capsys, caplog):
    assert _check("env.args.bad=none", "env.args.repeat=true") == 1
    out = capsys.readouterr().out.splitlines()
    assert "  FAILED  tasks('dev'): task id 'dev-0' appears 4 times; each task needs its own " \
           "id" in out
    cfg = config_from_dict({"env": {"name": f"{HERE}:BadValues", "args": {"repeat": True}}})
    with caplog.at_level(logging.WARNING, logger="agent_r1_async.run.preflight.env_check"):
        preflight_env(cfg.env, {"train": 1})
    assert [r.getMessage() for r in caplog.records] == [
        f"env '{HERE}:BadValues': tasks('train'): task id 'train-0' appears 4 times; each task "
        "needs its own id"]


class IntIds(BadValues):
    def tasks(self, split: str) -> list[Task]:
        return [Task(7, "q")]  # type: ignore[arg-type]


def test_a_task_id_that_is_not_a_string_stops_the_preflight():
    cfg = config_from_dict({"env": {"name": f"{HERE}:IntIds"}})
    with pytest.raises(Exception) as info:
        preflight_env(cfg.env, {"train": 1})
    assert str(info.value) == (f"env '{HERE}:IntIds': tasks('train') has a task whose task_id "
                               "is 7; a task_id must be a non-empty str")


# ------------------------------------------------------------------------------ eval


def test_eval_exits_1_when_every_episode_failed(capsys):
    rc = main(["eval", "--split", "dev", "--num-tasks", "1",
               "--set", f"env.name={HERE}:BadValues", "--set", "env.args.bad=none_reward",
               "--set", "model.name_or_path=tiny-random-llama", "--set", "engine.backend=hf",
               "--set", "engine.max_new_tokens=4", "--set", "eval.samples_per_task=2",
               "--set", "env.max_turns=2"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "failed_rate" in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        "agent-r1-async: every episode failed (2 of 2); first: env_error (task dev-0): "
        f"env.step: StepResult.reward is None, {REAL}")

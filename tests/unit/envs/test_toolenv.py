"""ToolEnv: parsing of tool calls, validation, concurrent tools with timeouts, rewards, done."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent_r1_async.envs.base import Env, EnvError
from agent_r1_async.envs.toolenv import (
    CallError,
    Shaping,
    ToolCall,
    ToolEnv,
    parse_tool_calls,
    schema_errors,
    tool_call_text,
    tool_prompt,
)
from tests.fakes.envs import TASK, EchoTool, FakeDomain, SleepTool


def call(name: str, args: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


# --- parsing -----------------------------------------------------------------------------


def test_parse_single_call_with_surrounding_text_and_whitespace():
    body = '{"name": "search", "arguments": {"query": "x"}}'
    text = f"I will search.\n<tool_call>\n {body} \n</tool_call>"
    assert parse_tool_calls(text) == [ToolCall("search", {"query": "x"})]


def test_parse_multiple_calls_in_order():
    text = call("a", '{"i": 1}') + " and " + call("b", '{"i": 2}') + call("c", "{}")
    assert parse_tool_calls(text) == [
        ToolCall("a", {"i": 1}),
        ToolCall("b", {"i": 2}),
        ToolCall("c", {}),
    ]


def test_parse_nested_json_and_closing_tag_inside_a_string():
    args = '{"filter": {"year": [1990, {"lt": 2000}]}, "q": "a </tool_call> b"}'
    (parsed,) = parse_tool_calls(call("s", args))
    assert parsed == ToolCall(
        "s", {"filter": {"year": [1990, {"lt": 2000}]}, "q": "a </tool_call> b"}
    )


def test_parse_arguments_given_as_json_string_and_missing_arguments():
    text = (
        '<tool_call>{"name": "s", "arguments": "{\\"q\\": 1}"}</tool_call>'
        '<tool_call>{"name": "t"}</tool_call>'
    )
    assert parse_tool_calls(text) == [ToolCall("s", {"q": 1}), ToolCall("t", {})]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('<tool_call>{"name": "s", "arguments": {"q": 1}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "s", "arguments": {}}', "not closed"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
        ('<tool_call>{"name": "s", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "s", "arguments": "not json"}</tool_call>', "not JSON"),
    ],
)
def test_parse_malformed_becomes_call_error(text, fragment):
    (parsed,) = parse_tool_calls(text)
    assert isinstance(parsed, CallError)
    assert fragment in parsed.message


def test_parse_malformed_then_valid_keeps_going():
    text = "<tool_call>{oops}</tool_call> then " + call("a", "{}")
    parsed = parse_tool_calls(text)
    assert isinstance(parsed[0], CallError) and parsed[1] == ToolCall("a", {})


def test_no_tool_call():
    assert parse_tool_calls("The answer is 4.") == []


def test_schema_errors_and_round_trip_of_call_text():
    schema = EchoTool.parameters
    assert schema_errors(schema, {"text": "hi"}) == []
    assert schema_errors(schema, {}) == ["'text' is a required property"]
    assert len(schema_errors(schema, {"text": 1, "extra": 2})) == 2
    c = ToolCall("echo", {"text": "ü"})
    assert parse_tool_calls(tool_call_text(c)) == [c]
    assert '"name": "echo"' in tool_prompt([EchoTool()])


# --- the env -----------------------------------------------------------------------------


def make_env(max_turns: int = 4, timeout: float = 1.0, **shaping) -> ToolEnv:
    return ToolEnv(
        FakeDomain(), max_turns=max_turns, tool_timeout_s=timeout, shaping=Shaping(**shaping)
    )


def run(coro):
    return asyncio.run(coro)


def test_reset_gives_system_and_user_and_env_protocol():
    env = make_env()
    assert isinstance(env, Env)
    obs = run(env.reset(TASK))
    assert obs.messages == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Say the word."},
    ]


def test_tool_call_then_answer_rewards_and_metrics():
    env = make_env(valid_call=0.1)

    async def episode():
        await env.reset(TASK)
        r1 = await env.step(call("echo", '{"text": "gold"}'))
        r2 = await env.step(call("echo", '{"text": "x"}'))
        r3 = await env.step("done <answer>gold</answer>")
        return r1, r2, r3

    r1, r2, r3 = run(episode())
    assert r1.observation.messages == [
        {"role": "user", "content": "<tool_response>\ngold\n</tool_response>"}
    ]
    # r1: valid_call 0.1 (first well-formed step) + 0.5 domain process reward ("gold")
    assert r1.reward == pytest.approx(0.6) and not r1.done and r1.num_tool_calls == 1
    assert r2.reward == 0.0  # the well-formed bonus is paid once per episode
    assert (
        r3.done and not r3.truncated and r3.outcome_reward == 1.0 and r3.observation.messages == []
    )
    assert r3.metrics == {
        "success": 1.0,
        "format_ok": 1.0,
        "turns": 3.0,
        "tool_calls": 2.0,
        "tool_errors": 0.0,
        "truncated": 0.0,
        # canaries (envs/canaries.py): tools were used; "gold" is one word, not a copy
        "hacking_no_tool_score": 0.0,
        "hacking_verbatim_copy": 0.0,
    }
    with pytest.raises(EnvError):
        run(env.step("again"))


def test_malformed_unknown_and_schema_invalid_are_error_responses_with_penalty():
    env = make_env(invalid_call=-0.2)
    run(env.reset(TASK))
    action = (
        "<tool_call>{bad}</tool_call>"
        + call("nope", "{}")
        + call("echo", '{"times": 0}')
        + call("echo", '{"text": "ok"}')
    )
    r = run(env.step(action))
    assert not r.done and r.reward == pytest.approx(-0.2) and r.num_tool_calls == 4
    blocks = r.observation.messages[0]["content"].split("</tool_response>\n<tool_response>")
    assert len(blocks) == 4
    assert "not valid JSON" in blocks[0]
    assert "unknown tool 'nope'. Available tools: echo, sleep, boom, junk" in blocks[1]
    assert (
        "invalid arguments for echo" in blocks[2] and "'text' is a required property" in blocks[2]
    )
    assert blocks[3].endswith("ok\n</tool_response>")  # the valid call in the same action still ran


def test_tool_exception_and_bad_type_become_error_responses():
    env = make_env()
    run(env.reset(TASK))
    r = run(env.step(call("boom", "{}") + call("junk", "{}")))
    content = r.observation.messages[0]["content"]
    assert "Error: boom failed: RuntimeError: kaboom" in content
    assert "Error: junk returned an unsupported object" in content
    assert not r.done
    end = run(env.step("<answer>x</answer>"))
    assert end.metrics["tool_errors"] == 2.0 and end.outcome_reward == 0.0


def test_slow_tool_is_cut_at_timeout_while_other_call_completes():
    domain = FakeDomain()
    sleeper = domain.tools[1]
    env = ToolEnv(domain, max_turns=3, tool_timeout_s=0.2)
    run(env.reset(TASK))
    t0 = time.monotonic()
    r = run(env.step(call("sleep", '{"seconds": 30}') + call("sleep", '{"seconds": 0.05}')))
    elapsed = time.monotonic() - t0
    content = r.observation.messages[0]["content"]
    assert "Error: sleep timed out after 0.2 s." in content and "slept 0.05" in content
    # Cut at the 0.2 s timeout, not after the 30 s: the sleep was cancelled (it never ended).
    assert isinstance(sleeper, SleepTool) and sleeper.cancelled == 1
    assert elapsed >= 0.2  # not before the timeout


def test_no_tool_call_ends_episode_without_answer():
    env = make_env()
    run(env.reset(TASK))
    r = run(env.step("I think it is gold."))
    assert r.done and r.outcome_reward == 0.0 and r.metrics["format_ok"] == 0.0 and not r.truncated


def test_max_turns_truncates_without_running_calls():
    env = make_env(max_turns=2, valid_call=0.1)
    run(env.reset(TASK))
    r1 = run(env.step(call("echo", '{"text": "a"}')))
    r2 = run(env.step(call("sleep", '{"seconds": 30}')))  # would time out if it ran
    assert not r1.done and r2.done and r2.truncated and r2.observation.messages == []
    assert (
        r2.metrics["truncated"] == 1.0 and r2.metrics["turns"] == 2.0 and r2.outcome_reward == 0.0
    )


def test_too_many_calls_per_action():
    env = make_env(max_calls_per_action=2, invalid_call=-0.1)
    run(env.reset(TASK))
    r = run(env.step(call("echo", '{"text": "a"}') * 3))
    content = r.observation.messages[0]["content"]
    assert content.count("<tool_response>\na\n</tool_response>") == 2
    assert "at most 2 tool calls per turn" in content and r.reward == pytest.approx(-0.1)


def test_domain_bug_raises_env_error():
    env = ToolEnv(FakeDomain(fail_score=True), max_turns=2, tool_timeout_s=1.0)
    run(env.reset(TASK))
    with pytest.raises(EnvError, match=r"FakeDomain\.score failed: ZeroDivisionError"):
        run(env.step("<answer>gold</answer>"))


def test_answer_wins_over_tool_calls_in_same_action():
    env = make_env()
    run(env.reset(TASK))
    r = run(env.step(call("echo", '{"text": "a"}') + "<answer>gold</answer>"))
    assert r.done and r.outcome_reward == 1.0 and r.metrics["tool_calls"] == 0.0


def test_domain_output_metrics_see_the_last_action_whatever_its_format():
    class Graded(FakeDomain):
        def output_metrics(self, task, action):
            return {"said_gold": float("gold" in action), "chars": float(len(action))}

    env = ToolEnv(Graded(), max_turns=3, tool_timeout_s=1.0)
    run(env.reset(TASK))
    run(env.step(call("echo", '{"text": "gold"}')))  # gold in a call, not in the last action
    r = run(env.step("it must be gold"))  # no tags: no answer, but the metric sees the text
    assert r.done and r.outcome_reward == 0.0 and r.metrics["format_ok"] == 0.0
    assert r.metrics["said_gold"] == 1.0 and r.metrics["chars"] == 15.0
    run(env.reset(TASK))
    r = run(env.step("<answer>silver</answer>"))
    assert r.metrics["said_gold"] == 0.0 and r.metrics["chars"] == 23.0
    plain = make_env()
    run(plain.reset(TASK))
    assert "said_gold" not in run(plain.step("gold")).metrics  # a domain without the hook


def test_domain_output_metrics_must_be_numbers():
    class Bad(FakeDomain):
        def output_metrics(self, task, action):
            return {"x": "high"}

    env = ToolEnv(Bad(), max_turns=2, tool_timeout_s=1.0)
    run(env.reset(TASK))
    with pytest.raises(EnvError, match="output_metrics"):
        run(env.step("<answer>gold</answer>"))

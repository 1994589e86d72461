"""Chat requests as canonical messages, and answers with their tool calls: what the session
compares and what the template renders."""

from __future__ import annotations

import json

import pytest

from agent_r1_async.actors.endpoint.chat import answer, canonical_message, parse_chat
from agent_r1_async.actors.endpoint.params import EngineSampling, RequestError
from agent_r1_async.actors.endpoint.toolcalls import split_tool_calls

ENGINE = EngineSampling(max_new_tokens=16)


def test_an_echoed_answer_is_canonically_the_answer_given():
    text = ('Let me compute.\n<tool_call>\n{"name": "calc", "arguments": {"x": "2*3"}}\n'
            "</tool_call>")
    ans = answer(text, parse_tools=True)
    assert ans.canonical == {"role": "assistant", "content": "Let me compute.", "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"x": "2*3"}}}]}
    (call,) = ans.message["tool_calls"]
    assert call["id"].startswith("call_") and json.loads(call["function"]["arguments"]) == {
        "x": "2*3"}
    # What an OpenAI client sends back (ids, JSON-string arguments) is the same message.
    assert canonical_message(ans.message, "m") == ans.canonical
    assert ans.num_tool_calls == 1
    # Without tools offered the text stays the content, untouched.
    assert answer(text, parse_tools=False).canonical == {"role": "assistant", "content": text}


def test_blocks_that_do_not_parse_stay_in_the_content():
    text = "<tool_call>not json</tool_call> and <tool_call>{\"name\": 3}</tool_call>"
    assert split_tool_calls(text) == (text, [])
    content, calls = split_tool_calls(
        'a <tool_call>{"name": "f", "arguments": "{\\"k\\": 1}"}</tool_call> b')
    assert content == "a  b" and [(c.name, c.arguments) for c in calls] == [("f", {"k": 1})]


def test_canonical_messages_join_text_parts_and_keep_what_templates_read():
    assert canonical_message({"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "x"}, "m") == {
        "role": "user", "content": "ab"}
    assert canonical_message({"role": "tool", "content": "84", "tool_call_id": "call_1"},
                             "m") == {"role": "tool", "content": "84", "tool_call_id": "call_1"}
    assert canonical_message({"role": "assistant", "content": None}, "m") == {
        "role": "assistant", "content": ""}


@pytest.mark.parametrize("body, message", [
    ({"messages": []}, "messages: must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]: must be an object with a "
                                                        "role in system, developer, user"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content: a 'image_url' part is not served (text only)"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
     "tool_choice='required': only 'auto' and 'none' are served"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
     "response_format: only {\"type\": \"text\"} is served"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments: is not JSON"),
])
def test_bad_requests_are_refused_in_one_line(body, message):
    with pytest.raises(RequestError) as err:
        parse_chat(body, ENGINE)
    assert err.value.message.startswith(message), err.value.message


def test_tools_and_budget_are_read():
    req = parse_chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": "none", "user": "sess", "logprobs": True}, ENGINE)
    assert (req.max_new_tokens, req.parse_tools, req.user, req.want_logprobs) == (
        4, False, "sess", True)
    assert req.tools == [{"type": "function", "function": {"name": "f"}}]

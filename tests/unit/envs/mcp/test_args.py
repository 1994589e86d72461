"""The `mcp_tools` env's pieces that need no server: `env.args` checks, result text and its
size cap, numeric scoring, oracle actions. Live servers: tests/integration/test_mcp_live.py."""

from __future__ import annotations

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent

from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.mcp.env import McpToolsEnv, numeric_match
from agent_r1_async.envs.mcp.results import McpToolError, tool_output, truncate
from agent_r1_async.envs.registry import list_envs, parse_args

GOOD = {"name": "u", "command": ["python", "srv.py"]}


def args(**kw):
    return parse_args(McpToolsEnv, {"servers": [GOOD], "tasks": "m:f", **kw})


@pytest.mark.parametrize(("server", "message"), [
    ({"name": "u"}, "config key `env.args.servers[0]`: 'u' needs exactly one of command (stdio) and url "
                     "(streamable HTTP)"),
    ({**GOOD, "url": "http://h/mcp"}, "needs exactly one of command (stdio) and url"),
    ({"name": "u", "url": "ftp://h"}, "'u' url must be http:// or https://"),
    ({**GOOD, "headers_env": {"Authorization": "T"}}, "'u' headers_env is for url servers"),
    ({**GOOD, "max_result_chars": 10}, "'u' max_result_chars must be >= 64"),
    ({**GOOD, "max_concurrency": 0}, "'u' max_concurrency must be >= 1"),
    ({**GOOD, "timeout_s": 0}, "'u' timeout_s and connect_timeout_s must be > 0"),
    ({"name": "a b", "command": ["x"]}, "name 'a b' must be letters"),
    ({**GOOD, "headers": {"Authorization": "x"}}, "unknown config key `env.args.servers[0].headers`"),
])
def test_bad_server_args_name_the_key(server, message):
    with pytest.raises(ConfigError) as err:
        parse_args(McpToolsEnv, {"servers": [server], "tasks": "m:f"})
    assert message in str(err.value)


def test_tool_args_checks():
    a = args()
    s = a.servers[0]
    assert (s.shared, s.max_concurrency, s.timeout_s, s.retries, s.max_result_chars) == \
        (False, 8, 5.0, 1, 4000)
    with pytest.raises(ConfigError, match="server names repeat"):
        parse_args(McpToolsEnv, {"servers": [GOOD, GOOD], "tasks": "m:f"})
    with pytest.raises(ConfigError, match=r"^config key `env\.args\.tasks`: must be 'module:function'$"):
        args(tasks="m.f")
    with pytest.raises(ConfigError, match=r"^config key `env\.args\.score`: Invalid enum value "
                                          r"'f1' \(one of exact, numeric\)$"):
        args(score="f1")


def test_server_timeout_must_be_below_the_tool_timeout():
    cfg = EnvConfig(name="mcp_tools", tool_timeout_s=5.0)
    with pytest.raises(ConfigError, match=r"'u' timeout_s \(5\) must be below env.tool_timeout_s"):
        McpToolsEnv(args(), cfg)  # fails before any server is started


def test_python_command_is_this_interpreter():
    import sys

    assert args().servers[0].argv() == [sys.executable, "srv.py"]


def test_truncation_is_marked_with_what_was_cut():
    assert truncate("x" * 64, 64, "u") == "x" * 64
    assert truncate("x" * 70, 64, "u") == ("x" * 64 + "\n[truncated by the MCP client: 6 of 70 "
                                           "characters cut (server 'u', max_result_chars=64)]")


def test_result_text_joins_blocks_and_errors_raise():
    res = CallToolResult(content=[TextContent(type="text", text="a"),
                                  ImageContent(type="image", data="AA==", mime_type="image/png"),
                                  TextContent(type="text", text="b")])
    assert tool_output(res, 100, "u") == "a\n[image content image/png]\nb"
    res = CallToolResult(content=[], structured_content={"k": 1})
    assert tool_output(res, 100, "u") == '{"k": 1}'
    bad = CallToolResult(content=[TextContent(type="text", text="unknown unit 'zz'")],
                         is_error=True)
    with pytest.raises(McpToolError, match=r"^unknown unit 'zz'$"):
        tool_output(bad, 100, "u")


@pytest.mark.parametrize(("answer", "ok"), [
    ("27.9723", True), ("27.97", True), ("about 27.9723 oz", True), ("27.9", False),
    ("1,000", False), ("", False), (None, False), ("-27.9723", False),
])
def test_numeric_match_within_rel_tol(answer, ok):
    # |27.97 - 27.9723| / 27.9723 = 8.2e-5 <= 1e-3; |27.9 - 27.9723| / 27.9723 = 2.6e-3 > 1e-3
    assert numeric_match(answer, 27.9723, 1e-3) is ok


def test_oracle_plays_the_calls_then_answers():
    env = McpToolsEnv.__new__(McpToolsEnv)
    task = Task("t", "q", 3000.0, {"oracle": [
        {"name": "convert", "arguments": {"value": 3, "from_unit": "km", "to_unit": "m"}},
        "thinking"]})
    assert env.oracle(task) == [
        '<tool_call>{"name": "convert", "arguments": {"value": 3, "from_unit": "km", '
        '"to_unit": "m"}}</tool_call>', "thinking", "<answer>3000.0</answer>"]
    assert env.oracle(Task("t", "q", 1)) is None


def test_listed_as_a_builtin():
    assert dict(list_envs())["mcp_tools"] == (
        "Tools from MCP servers (stdio or streamable HTTP) on tasks from a Python function.")


def test_example_tasks_are_disjoint_and_the_oracle_is_right():
    from examples.mcp_units_server import convert_value, tasks

    splits = {s: tasks(s) for s in ("train", "dev", "test")}
    assert [len(v) for v in splits.values()] == [3000, 100, 100]
    prompts = [{t["prompt"] for t in v} for v in splits.values()]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    assert convert_value(3, "km", "m") == 3000.0
    assert convert_value(793, "g", "oz") == 27.9723  # 793 / 28.349523125 = 27.97226...
    assert convert_value(1, "day", "min") == 1440.0
    for t in splits["dev"]:
        a = t["oracle"][0]["arguments"]
        assert t["answer"] == convert_value(a["value"], a["from_unit"], a["to_unit"])
    with pytest.raises(ValueError, match="cannot convert length"):
        convert_value(1, "m", "kg")

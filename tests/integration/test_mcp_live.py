"""MCP tools against real servers on loopback (mcp_fixture_server.py over stdio and over
streamable HTTP): nothing is mocked at the protocol level.

Each test builds the `mcp_tools` env as a run does and plays episodes with scripted actions:
the schemas reach the rendered prompt, calls return, per-episode sessions are fresh, a
killed server fails its episode with a clear error and the next episode reconnects, a hung
call is cut at the server's timeout, and an oversized result is truncated and marked.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_r1_async.actors.context import History
from agent_r1_async.config import ConfigError, EnvConfig
from agent_r1_async.envs import host_loop
from agent_r1_async.envs.base import EnvError
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.toolenv import ToolCall, tool_call_text
from agent_r1_async.models import load_tokenizer, tiny_model_dir

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "mcp_fixture_server.py")
TASKS = "mcp_fixture_server:tasks"  # importable: pytest puts this directory on sys.path


def call(name: str, **arguments: Any) -> str:
    return tool_call_text(ToolCall(name, arguments))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """The fixture server over streamable HTTP on a loopback port; restartable."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, SERVER, "--http", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, "the fixture server exited"
                time.sleep(0.05)
        raise AssertionError("the fixture server did not listen within 30 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()


_built: list[Any] = []


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    """Each test's stdio servers and HTTP sessions end with the test."""
    yield
    while _built:
        for server in _built.pop().definition.servers:
            host_loop.run_sync(server.close_all(), 15.0)


def spec_for(server: dict[str, Any], **env: Any):
    # Bounds generous enough for a loaded 2-core machine (a stdio server's start imports the
    # SDK); the tests that exercise a timeout set their own.
    s = {"name": "fx", "timeout_s": 30.0, "connect_timeout_s": 60.0, **server}
    cfg = EnvConfig(name="mcp_tools", max_turns=8, tool_timeout_s=45.0, **env,
                    args={"servers": [s], "tasks": TASKS})
    spec = get_env_spec(cfg)
    _built.append(spec)
    return spec


def stdio(**kw: Any) -> dict[str, Any]:
    return {"command": ["python", SERVER], **kw}


async def play(spec, actions: list[str]) -> list[str]:
    """One episode: the text of each step's tool responses."""
    env = spec.make()
    await env.reset(spec.tasks("dev")[0])
    out = []
    for action in actions:
        res = await env.step(action)
        out.append(res.observation.messages[0]["content"] if res.observation.messages else "")
    return out


def body(response: str) -> str:
    return response.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny_model_dir())


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_schemas_reach_the_prompt_and_calls_return(transport, tok, request):
    server = (stdio() if transport == "stdio"
              else {"url": request.getfixturevalue("http_server").url})
    spec = spec_for(server)
    env = spec.make()
    obs = asyncio.run(env.reset(spec.tasks("dev")[0]))
    names = [t["function"]["name"] for t in obs.tools]
    assert names == ["echo", "count", "pid", "sleep", "big", "auth", "meet"]
    h = History(tok)
    h.add_messages(obs.messages, obs.tools)
    text = tok.decode(h.instruction_ids)
    for t in obs.tools:
        assert json.dumps(t["function"]) in text
    echo = next(t["function"] for t in obs.tools if t["function"]["name"] == "echo")
    assert echo["description"] == "Return the text."
    assert echo["parameters"]["required"] == ["text"]

    # one session per episode: the counter starts at 1 in each
    first = asyncio.run(play(spec, [call("echo", text="hé"), call("count"), call("count")]))
    assert [body(r) for r in first] == ["hé", "1", "2"]
    second = asyncio.run(play(spec, [call("count")]))
    assert [body(r) for r in second] == ["1"]


def test_a_shared_session_serves_every_episode():
    spec = spec_for(stdio(shared=True))
    assert [body(r) for r in asyncio.run(play(spec, [call("count"), call("count")]))] == ["1", "2"]
    assert [body(r) for r in asyncio.run(play(spec, [call("count")]))] == ["3"]


def test_auth_header_comes_from_the_environment(http_server, monkeypatch):
    monkeypatch.setenv("FX_TOKEN", "Bearer s3cret")
    spec = spec_for({"url": http_server.url, "headers_env": {"Authorization": "FX_TOKEN"}})
    assert [body(r) for r in asyncio.run(play(spec, [call("auth")]))] == ["Bearer s3cret"]
    monkeypatch.delenv("FX_TOKEN")
    with pytest.raises(ConfigError, match="environment variable FX_TOKEN"):
        spec_for({"url": http_server.url, "headers_env": {"Authorization": "FX_TOKEN"}})


def test_a_hung_call_is_cut_at_the_timeout_and_the_episode_goes_on():
    spec = spec_for(stdio(timeout_s=1.0))
    t0 = time.perf_counter()
    # The call sleeps an hour: the episode ends at all only because timeout_s=1 cut it (the
    # 120 s guard fails a hang instead of waiting for pytest's own timeout).
    hung, after = asyncio.run(asyncio.wait_for(
        play(spec, [call("sleep", seconds=3600), call("echo", text="ok")]), 120))
    assert time.perf_counter() - t0 >= 1.0  # not before the timeout
    assert body(hung) == ("Error: sleep failed: McpTimeout: MCP server 'fx' (python "
                          f"{SERVER}) did not answer sleep within timeout_s=1")
    assert body(after) == "ok"


def test_a_result_over_the_cap_is_truncated_and_marked():
    spec = spec_for(stdio(max_result_chars=100))
    fits, cut = asyncio.run(play(spec, [call("big", n=100), call("big", n=250)]))
    assert body(fits) == "a" * 99 + "Z"
    assert body(cut) == ("a" * 100 + "\n[truncated by the MCP client: 150 of 250 characters "
                         "cut (server 'fx', max_result_chars=100)]")


async def _killed_mid_episode(spec, kill) -> None:
    env = spec.make()
    await env.reset(spec.tasks("dev")[0])
    res = await env.step(call("pid"))
    kill(int(body(res.observation.messages[0]["content"])))
    with pytest.raises(EnvError) as err:
        await env.step(call("count"))
    return err.value


def _sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def test_stdio_server_killed_mid_episode_fails_it_and_the_next_episode_reconnects():
    spec = spec_for(stdio())
    err = asyncio.run(_killed_mid_episode(spec, _sigkill))
    assert str(err).startswith(f"MCP server 'fx' (python {SERVER}) is gone for this episode: ")
    assert [body(r) for r in asyncio.run(play(spec, [call("count")]))] == ["1"]


def test_http_server_killed_mid_episode_fails_it_and_the_next_episode_reconnects(http_server):
    spec = spec_for({"url": http_server.url})
    err = asyncio.run(_killed_mid_episode(spec, lambda pid: http_server.kill()))
    assert str(err).startswith(f"MCP server 'fx' ({http_server.url}) is gone for this episode: ")
    with pytest.raises(EnvError, match="could not be reached: ConnectError"):
        asyncio.run(play(spec, [call("count")]))  # still down: one clear error
    http_server.start()
    assert [body(r) for r in asyncio.run(play(spec, [call("count")]))] == ["1"]


def test_a_shared_session_that_drops_is_reopened_and_the_call_retried():
    spec = spec_for(stdio(shared=True))

    async def episode() -> list[str]:
        env = spec.make()
        await env.reset(spec.tasks("dev")[0])
        pid = int(body((await env.step(call("pid"))).observation.messages[0]["content"]))
        _sigkill(pid)
        res = await env.step(call("pid"))
        return [str(pid), body(res.observation.messages[0]["content"])]

    old, new = asyncio.run(episode())
    assert new.isdigit() and new != old  # a new server process answered the retried call


def _unavailable(server: dict[str, Any]) -> str:
    """The one line a server that does not list its tools is: preflight fails with it, and
    in an actor (the definition builds) every episode fails with it while the actor lives."""
    from agent_r1_async.run.preflight.env_check import preflight_env

    spec = spec_for(server)
    line = spec.definition.unavailable
    with pytest.raises(ConfigError) as err:
        preflight_env(spec.env_cfg, {"train": 1})
    assert str(err.value) == line
    with pytest.raises(EnvError) as failed:
        asyncio.run(spec.make().reset(spec.tasks("train")[0]))
    assert str(failed.value) == line
    return line


def test_a_server_that_never_starts_is_one_line_naming_it():
    line = _unavailable({"command": ["python", "-c", "import sys; sys.exit('no config file')"]})
    assert line == ("MCP server 'fx' (python -c import sys; sys.exit('no config "
                    "file')) did not start: MCPError: Connection closed; stderr: no config file")
    port = free_port()  # nothing listens there
    assert re.match(rf"^MCP server 'fx' \(http://127.0.0.1:{port}/mcp\) could not be reached: "
                    "ConnectError", _unavailable({"url": f"http://127.0.0.1:{port}/mcp"}))


def test_a_server_that_writes_invalid_json_rpc_is_one_line(capfd):
    line = _unavailable({"command": ["python", SERVER, "--junk"]})
    assert line.startswith(f"MCP server 'fx' (python {SERVER} --junk) wrote 1 message(s) that "
                           "are not JSON-RPC while listing its tools (first: ")
    assert "Traceback" not in capfd.readouterr().err  # the SDK's traceback is not printed


def test_a_server_lost_after_the_build_fails_episodes_until_it_lists_again(monkeypatch):
    """Listing fails at first (the server hangs after preflight): the actor's episodes fail
    with the line; once a relisting (every RELIST_S) succeeds, episodes play again."""
    from agent_r1_async.envs.mcp import env as mcp_env

    spec = spec_for(stdio())
    d = spec.definition
    assert d.unavailable == "" and d.specs
    d.unavailable = "MCP server 'fx' did not list its tools: TimeoutError"  # as if lost
    monkeypatch.setattr(mcp_env, "RELIST_S", 0.0)
    unlisted = spec.make()  # starts a relisting in the background, fails this episode
    with pytest.raises(EnvError, match="did not list its tools"):
        asyncio.run(unlisted.reset(spec.tasks("train")[0]))
    assert d._relisting is not None
    d._relisting.join(30)
    assert d.unavailable == ""
    assert [body(r) for r in asyncio.run(play(spec, [call("echo", text="back")]))] == ["back"]


@pytest.mark.parametrize(("limit", "within_s"), [(1, 0.8), (2, 3.0)])
def test_max_concurrency_bounds_calls_in_flight(limit, within_s):
    """Two `meet` calls in one action (ToolEnv runs them concurrently), each waiting for the
    other to be in flight too: the server counts how many ever were at once. max_concurrency=1
    holds the second back while the first waits (it gives up after within_s): a peak of 1;
    at 2 they meet at once (within_s only bounds a failure): a peak of 2."""
    spec = spec_for(stdio(shared=True, max_concurrency=limit, timeout_s=4.0))
    meet = call("meet", n=2, within_s=within_s)
    (out,) = asyncio.run(play(spec, [meet + meet]))
    assert out.count(f"peak {limit}") == 2, out


def test_a_group_of_episodes_gets_one_session_each(http_server):
    spec = spec_for({"url": http_server.url, "max_concurrency": 8})

    async def group() -> list[list[str]]:
        return await asyncio.gather(*(play(spec, [call("count"), call("count")])
                                      for _ in range(8)))

    assert [[body(r) for r in ep] for ep in asyncio.run(group())] == [["1", "2"]] * 8


def test_an_abandoned_episode_stops_its_stdio_server():
    import gc

    spec = spec_for(stdio())

    async def abandoned() -> int:
        env = spec.make()  # the rollout drops an env whose episode failed elsewhere
        await env.reset(spec.tasks("dev")[0])
        return int(body((await env.step(call("pid"))).observation.messages[0]["content"]))

    pid = asyncio.run(abandoned())
    gc.collect()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()

"""The `env.args` of the `mcp_tools` env: the MCP servers and the tasks played with their tools."""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import urlparse

import msgspec

from agent_r1_async.envs.servers import command_argv, env_headers


class McpServerArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One MCP server: a stdio command or a streamable-HTTP URL, and its limits."""

    name: str
    """Named in errors, in `envs check` and in preflight."""
    command: list[str] = []
    """stdio: the server's argv (a first element `python` is this interpreter)."""
    url: str = ""
    """Streamable HTTP: the endpoint, e.g. http://127.0.0.1:8765/mcp."""
    headers_env: dict[str, str] = {}
    """HTTP header -> environment variable that holds its value (auth never sits in config)."""
    pass_env: list[str] = []
    """stdio: environment variables passed on to the server (besides PATH, HOME, ...)."""
    cwd: str = ""
    """stdio: the server's working directory (default: the process's)."""
    shared: bool = False
    """One session per actor process for every episode (read-only servers); default: one
    session per episode (stdio: one server process per episode)."""
    max_concurrency: int = 8
    """Calls in flight to this server at once, per actor process."""
    timeout_s: float = 5.0
    """A call that takes longer fails that call; must stay below env.tool_timeout_s."""
    connect_timeout_s: float = 30.0
    """Starting the server (stdio) or opening its session (HTTP)."""
    retries: int = 1
    """Reconnects and retries of a call whose session dropped."""
    max_result_chars: int = 4000
    """Longer results are cut to this many characters and marked as truncated."""
    prefix: str = ""
    """Prepended to this server's tool names (two servers with the same tool names)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"name {self.name!r} must be letters, digits, _ . -")
        if bool(self.command) == bool(self.url):
            raise ValueError(f"{self.name!r} needs exactly one of command (stdio) "
                             "and url (streamable HTTP)")
        if self.url and urlparse(self.url).scheme not in ("http", "https"):
            raise ValueError(f"{self.name!r} url must be http:// or https://")
        if self.headers_env and not self.url:
            raise ValueError(f"{self.name!r} headers_env is for url servers")
        for what, value, low in (("max_concurrency", self.max_concurrency, 1),
                                 ("max_result_chars", self.max_result_chars, 64),
                                 ("retries", self.retries, 0)):
            if value < low:
                raise ValueError(f"{self.name!r} {what} must be >= {low}")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError(f"{self.name!r} timeout_s and connect_timeout_s must "
                             "be > 0")

    @property
    def where(self) -> str:
        """How the server is reached, for messages: its URL or its command line."""
        return self.url or " ".join(self.command)

    def argv(self) -> list[str]:
        return command_argv(self.command)

    def headers(self) -> dict[str, str]:
        """The HTTP headers, read from the environment now (a missing variable: ConfigError)."""
        return env_headers(self.headers_env, f"MCP server {self.name!r}")

    def child_env(self) -> dict[str, str]:
        return {k: os.environ[k] for k in self.pass_env if k in os.environ}


class McpToolsArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    servers: list[McpServerArgs]
    """The MCP servers whose tools the agent may call (at least one; names unique)."""
    tasks: str
    """`module:function`; `function(split)` returns the split's tasks, each a `Task` or a dict
    {"id", "prompt", "answer", "oracle"?} (oracle: tool calls {"name", "arguments"} or
    action strings, played before the answer)."""
    score: Literal["numeric", "exact"] = "numeric"
    """How an answer is scored against the task's: "numeric" (within rel_tol) or "exact"."""
    rel_tol: float = 1e-3
    """Relative tolerance of the "numeric" score."""
    system_prompt: str = ""
    """Default: a prompt naming the tool-call and answer formats."""
    valid_call_reward: float = 0.1
    """Process reward for the first step of an episode whose tool calls are all well-formed."""
    invalid_call_penalty: float = -0.1
    """Process reward of a step with a malformed call."""

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("servers: name at least one MCP server")
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"servers: server names repeat: {names}")
        if ":" not in self.tasks:
            raise ValueError("tasks: must be 'module:function'")
        if self.rel_tol < 0:
            raise ValueError("rel_tol: must be >= 0")

"""What every env server started as a command or reached by URL shares (MCP servers, OpenEnv
servers): the command line that starts it, and the HTTP headers read from the environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

from agent_r1_async.config import ConfigError


def command_argv(command: Iterable[str]) -> list[str]:
    """`command` as an argv: a first element `python` is this interpreter (the venv's)."""
    first, *rest = command
    return [sys.executable if first == "python" else first, *rest]


def env_headers(headers_env: Mapping[str, str], who: str) -> dict[str, str]:
    """{header: value of the environment variable `headers_env` names for it}, read now; a
    missing variable is a ConfigError naming `who`, the variable and the header."""
    out: dict[str, str] = {}
    for header, var in headers_env.items():
        value = os.environ.get(var)
        if value is None:
            raise ConfigError(f"{who}: environment variable {var} (header {header}) is not set")
        out[header] = value
    return out

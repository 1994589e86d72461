"""The `env.args` of the `openenv` env: the server, how text maps onto its types, the tasks."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlparse

import msgspec

from agent_r1_async.envs.servers import command_argv, env_headers

PORT = "{port}"
"""Written in `command`, it becomes the loopback port the server is to listen on."""
_OBSERVATION_RESERVED = ("reward", "done", "metadata")
"""Observation fields the server never sends as observation fields (rewards and `done` travel
beside them; metadata is not sent at all)."""


class SplitTasks(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The tasks of one split: each seed and each prompt is one task (one `reset`)."""

    seeds: list[int] = []
    """Seeds passed to reset as `seed`."""
    seed_range: list[int] = []
    """[start, stop): the seeds start, start + 1, ..., stop - 1 (after `seeds`)."""
    prompts: list[str] = []
    """Prompts passed to reset as the keyword named by `prompt_kwarg`."""

    def problem(self) -> str:
        """What is wrong with this split ("" when nothing is); the parent names the split."""
        if self.seed_range and (len(self.seed_range) != 2
                                or not 0 <= self.seed_range[0] < self.seed_range[1]):
            return f"seed_range must be [start, stop] with 0 <= start < stop, got {self.seed_range}"
        if any(s < 0 for s in self.seeds):
            return "seeds must be >= 0"
        seeds = self.all_seeds()
        if len(set(seeds)) != len(seeds):
            return "a seed repeats (in seeds, or in seeds and seed_range)"
        if len(set(self.prompts)) != len(self.prompts):
            return "a prompt repeats"
        if not seeds and not self.prompts:
            return "give seeds, a seed_range or prompts"
        return ""

    def all_seeds(self) -> list[int]:
        if len(self.seed_range) != 2:
            return list(self.seeds)
        return [*self.seeds, *range(self.seed_range[0], self.seed_range[1])]


class OpenEnvArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One OpenEnv server (a command started per process, or a URL) and its tasks."""

    name: str = "openenv"
    """Named in every error about the server."""
    command: list[str] = []
    """A local server: its argv, with "{port}" where the port goes (a first element `python`
    is this interpreter). Each process that plays episodes starts one on a free loopback port
    and stops it when it exits."""
    url: str = ""
    """A running server: its base URL (http(s)://host:port); the session is its /ws."""
    headers_env: dict[str, str] = {}
    """HTTP header -> environment variable holding its value (auth never sits in config)."""
    cwd: str = ""
    """command: the server's working directory (default: the process's)."""
    start_timeout_s: float = 60.0
    """command: how long the server has to answer GET /health after it is started."""
    restarts: int = 3
    """command: times a process restarts its server after the server exited; then every
    episode fails naming it."""
    connect_timeout_s: float = 10.0
    """Opening a WebSocket session (and each HTTP request: /health, /schema)."""
    timeout_s: float = 30.0
    """A reset or step the server does not answer within this fails its episode."""
    max_idle_sessions: int = 64
    """Sessions kept open between episodes for the next episode's reset (per process);
    0: each episode's session closes when the episode ends."""
    max_message_mb: float = 32.0
    """The largest WebSocket message accepted from the server (a larger one closes the session
    and fails its episode, naming this key)."""
    max_observation_chars: int = 8000
    """The most characters of an observation's text the agent reads; a longer one is cut, and
    the cut is marked in the text (as MCP's `max_result_chars`)."""
    action_field: str = "message"
    """The Action field that gets the agent's action text."""
    action_extra: dict[str, Any] = {}
    """Constant fields added to every Action."""
    observation_field: str = "message"
    """The Observation field whose value is the text the agent reads (a non-string value is
    shown as JSON)."""
    metric_fields: list[str] = []
    """Numeric or bool Observation fields logged as episode metrics (`env/<field>`)."""
    outcome: Literal["last", "sum"] = "last"
    """last: the final step's reward is the outcome and every earlier step's reward is its
    process reward; sum: the outcome is the sum of every step's reward and process rewards
    are 0. Either way the episode's return is the sum of the server's rewards."""
    system_prompt: str = ""
    """A system message before the reset observation (none when empty)."""
    tasks: dict[str, SplitTasks]
    """Split name (train, dev, test, ...) -> its tasks."""
    reset_kwargs: dict[str, Any] = {}
    """Keywords passed to every reset (besides the task's seed or prompt)."""
    prompt_kwarg: str = "prompt"
    """The reset keyword that carries a task's prompt."""
    oracle: str = ""
    """`module:function`; `function(reset_kwargs)` returns the oracle's action texts for the
    task reset with those keywords (or None), for `envs check` and warm-start demonstrations."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"name: {self.name!r} must be letters, digits, _ . -")
        if bool(self.command) == bool(self.url):
            raise ValueError("command: give exactly one of command (a local server) and url")
        if self.command and not any(PORT in part for part in self.command):
            raise ValueError(f"command: write {PORT} where the server's port goes, e.g. "
                             f"[python, server.py, --port, '{PORT}']")
        if self.url and (urlparse(self.url).scheme not in ("http", "https")
                         or not urlparse(self.url).netloc):
            raise ValueError(f"url: must be http(s)://host:port, got {self.url!r}")
        if self.cwd and not self.command:
            raise ValueError("cwd: is for a command server")
        for key in ("start_timeout_s", "connect_timeout_s", "timeout_s", "max_message_mb"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0")
        for key in ("restarts", "max_idle_sessions"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        if self.max_observation_chars < 64:
            raise ValueError("max_observation_chars: must be >= 64")
        if not self.action_field:
            raise ValueError("action_field: must name the Action field of the action text")
        if self.action_field in self.action_extra:
            raise ValueError(f"action_extra: sets {self.action_field!r}, the action_field")
        if not self.observation_field or self.observation_field in _OBSERVATION_RESERVED:
            raise ValueError(f"observation_field: must name an Observation field other than "
                             f"{', '.join(_OBSERVATION_RESERVED)}")
        bad = [f for f in self.metric_fields if not f or f in _OBSERVATION_RESERVED]
        if bad:
            raise ValueError(f"metric_fields: {bad[0]!r} is not an Observation field the "
                             "server sends")
        if not self.tasks:
            raise ValueError("tasks: name at least one split, e.g. {train: {seed_range: "
                             "[0, 1000]}, dev: {seed_range: [1000, 1100]}}")
        for split, tasks in self.tasks.items():
            problem = tasks.problem()
            if problem:
                raise ValueError(f"tasks: split {split!r}: {problem}")
        if not self.prompt_kwarg:
            raise ValueError("prompt_kwarg: must name the reset keyword of a prompt")
        for key in ("seed", self.prompt_kwarg):
            if key in self.reset_kwargs:
                raise ValueError(f"reset_kwargs: sets {key!r}, which each task sets")
        if self.oracle and ":" not in self.oracle:
            raise ValueError("oracle: must be 'module:function'")
        self._check_disjoint()

    def _check_disjoint(self) -> None:
        """No seed or prompt is in two splits (a held-out split must not be trained on)."""
        owner: dict[Any, str] = {}
        for split, tasks in self.tasks.items():
            for key in [*(("seed", s) for s in tasks.all_seeds()),
                        *(("prompt", p) for p in tasks.prompts)]:
                if key in owner:
                    kind, value = key
                    raise ValueError(f"tasks: {kind} {value!r} is in both {owner[key]} and "
                                     f"{split}")
                owner[key] = split

    @property
    def where(self) -> str:
        """How the server is reached, for messages: its URL or its command line."""
        return self.url or " ".join(self.command)

    @property
    def label(self) -> str:
        return f"OpenEnv server {self.name!r} ({self.where})"

    def argv(self, port: int) -> list[str]:
        return command_argv(part.replace(PORT, str(port)) for part in self.command)

    def headers(self) -> dict[str, str]:
        """The HTTP headers, read from the environment now (a missing variable: ConfigError)."""
        return env_headers(self.headers_env, self.label)

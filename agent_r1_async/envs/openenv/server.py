"""One OpenEnv server as this process sees it: a local process it started, or a URL.

- `command`: `start()` picks a free loopback port, starts the command with "{port}" replaced
  by it, and waits until GET /health answers 200 within `start_timeout_s`. A server that
  exits first, or never answers, is one line naming it with the last line it printed. The
  server runs in a session of its own and is stopped (SIGTERM, then SIGKILL) when this
  process exits; it also gets SIGKILL from the kernel when the thread that started it dies
  (Linux: PR_SET_PDEATHSIG), so a process killed outright leaves no server behind. Servers
  are started on the host loop's thread (envs/host_loop.py), which lives as long as the
  process. A server that exited is started again by `ensure_up()`, at most `restarts` times.
- `url`: nothing is started; `start()` checks GET /health (with the configured headers).

Either way `start()` then reads GET /schema and checks that the Action and Observation have
the fields `env.args` names. Every coroutine here runs on the host loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from agent_r1_async.config import ConfigError
from agent_r1_async.envs.child_process import OutputTail, spawn, stop_group
from agent_r1_async.envs.openenv.args import OpenEnvArgs
from agent_r1_async.envs.openenv.session import one_line

log = logging.getLogger(__name__)

_POLL_S = 0.1
_EXIT_GRACE_S = 1.0
"""After a session dropped: how long a dying server gets to be seen as exited."""


class ServerUnavailable(RuntimeError):
    """The server did not start, exited, or cannot be reached (one line naming it)."""


class SchemaMismatch(ConfigError):
    """The server's Action or Observation lacks a field that `env.args` names."""


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a restart's exception as seen (every waiter may have been cancelled)."""
    if not task.cancelled():
        task.exception()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpenEnvServer:
    """The server `args` names, as reached from this process."""

    def __init__(self, args: OpenEnvArgs) -> None:
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.output: OutputTail | None = None
        self.port = 0
        self.base_url = args.url.rstrip("/")
        self.restarted = 0
        self._starting: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        return self.args.label

    @property
    def ws_url(self) -> str:
        scheme, rest = self.base_url.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"

    @property
    def local(self) -> bool:
        """The server listens on loopback (a started one, or a URL to this host): no proxy."""
        host = self.base_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        return host in ("127.0.0.1", "localhost", "[::1]")

    # ------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start (command) or reach (url) the server, then check its schema."""
        if self.args.command:
            await self._launch()
        else:
            try:
                await self.get_json("/health")
            except ServerUnavailable as e:
                raise ServerUnavailable(f"{self.label} could not be reached: {e}") from None
        await self.check_schema()

    async def _launch(self) -> None:
        for attempt in (1, 2):
            self.port = free_port()
            self.base_url = f"http://127.0.0.1:{self.port}"
            argv = self.args.argv(self.port)
            self.proc = spawn(argv, cwd=self.args.cwd or None)
            assert self.proc.stdout is not None
            self.output = OutputTail(self.proc.stdout, "openenv server")
            try:
                await self._wait_healthy()
                return
            except ServerUnavailable:
                # Another process took the free port between the pick and the bind: once more.
                if attempt == 1 and "address already in use" in self._last_line().lower():
                    continue
                raise

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.args.start_timeout_s
        why = "no answer"
        while time.monotonic() < deadline:
            code = self.proc.poll() if self.proc is not None else None
            if code is not None:
                raise ServerUnavailable(f"{self.label} did not start: it exited with code "
                                        f"{code}{self._output_note()}")
            try:
                await self.get_json("/health", timeout_s=min(2.0, self.args.connect_timeout_s))
                return
            except ServerUnavailable as e:
                why = str(e)
            await asyncio.sleep(_POLL_S)
        self.stop()
        raise ServerUnavailable(
            f"{self.label} did not start: no answer to GET /health within start_timeout_s="
            f"{self.args.start_timeout_s:g} (last: {why}){self._output_note()}")

    async def ensure_up(self) -> None:
        """Start a command server again if it exited (at most `restarts` times); raises
        ServerUnavailable once they are used up. Episodes that find it dead at once share
        one restart, which runs on when a waiting episode is cancelled (a reset cut by
        env.step_timeout_s). A URL server is not checked here."""
        if self.proc is None:
            return
        if self._starting is None or self._starting.done():
            if self.proc.poll() is None:
                return
            self._starting = asyncio.get_running_loop().create_task(self._restart())
            self._starting.add_done_callback(_retrieve)
        await asyncio.shield(self._starting)

    async def _restart(self) -> None:
        note = self.exit_note()
        if self.restarted >= self.args.restarts:
            raise ServerUnavailable(f"{self.label} {note}; it is not restarted again "
                                    f"(restarts={self.args.restarts} used)")
        self.restarted += 1
        log.warning("%s %s; restarting it (%d of restarts=%d)", self.label, note,
                    self.restarted, self.args.restarts)
        await self._launch()

    def exit_note(self, during: str = "") -> str:
        """'exited with code N [during <what>]; output: <its last line>' for a command
        server that exited, else ''."""
        code = self.proc.poll() if self.proc is not None else None
        if code is None:
            return ""
        return f"exited with code {code}{' during ' + during if during else ''}" \
               f"{self._output_note()}"

    async def exited(self, during: str = "") -> str:
        """`exit_note()`, giving a server that is dying (its socket just closed) a moment."""
        if self.proc is None:
            return ""
        deadline = time.monotonic() + _EXIT_GRACE_S
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.exit_note(during)

    def _last_line(self) -> str:
        return self.output.last() if self.output is not None else ""

    def _output_note(self) -> str:
        last = self._last_line()
        return f"; output: {last}" if last else ""

    def stop(self) -> None:
        """Stop a started server and its process group (from any thread; idempotent)."""
        stop_group(self.proc)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.stop)

    # ----------------------------------------------------------------------------- HTTP

    async def get_json(self, path: str, timeout_s: float | None = None) -> Any:
        """GET `path` on the server; its JSON. Failures are ServerUnavailable('GET path: why')."""
        timeout = self.args.connect_timeout_s if timeout_s is None else timeout_s
        return await asyncio.to_thread(self._get_json, path, timeout)

    def _get_json(self, path: str, timeout_s: float) -> Any:
        req = urllib.request.Request(self.base_url + path, headers=self.args.headers())
        handlers = [urllib.request.ProxyHandler({})] if self.local else []
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise ServerUnavailable(f"GET {path}: HTTP {e.code} {e.reason}") from None
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None)
            raise ServerUnavailable(
                f"GET {path}: {one_line(reason if isinstance(reason, BaseException) else e)}"
            ) from None

    async def check_schema(self) -> None:
        """The Action has `action_field` and every `action_extra` key, and needs no other
        field; the Observation has `observation_field` and every `metric_fields` entry.
        A server without a readable /schema is not checked (a warning)."""
        try:
            schema = await self.get_json("/schema")
            action, observation = schema["action"], schema["observation"]
            act_fields = set(action.get("properties", {}))
            obs_fields = set(observation.get("properties", {}))
            required = set(action.get("required", []))
        except (ServerUnavailable, KeyError, TypeError, AttributeError) as e:
            log.warning("%s: its /schema cannot be read (%s); the field names in env.args "
                        "are not checked", self.label, e)
            return
        a = self.args
        shown_act = ", ".join(sorted(act_fields)) or "(none)"
        shown_obs = ", ".join(sorted(obs_fields - {"reward", "done", "metadata"})) or "(none)"
        if a.action_field not in act_fields:
            raise SchemaMismatch(f"config key `env.args.action_field`: {a.action_field!r} is "
                                 f"not a field of the Action of {self.label}; its fields: "
                                 f"{shown_act}")
        extra = sorted(set(a.action_extra) - act_fields)
        if extra:
            raise SchemaMismatch(f"config key `env.args.action_extra`: {extra[0]!r} is not a "
                                 f"field of the Action of {self.label}; its fields: {shown_act}")
        missing = sorted(required - {a.action_field, *a.action_extra})
        if missing:
            raise SchemaMismatch(f"config key `env.args.action_extra`: the Action of "
                                 f"{self.label} requires {', '.join(missing)}; give "
                                 "constant values there")
        for key, name in [("observation_field", a.observation_field),
                          *(("metric_fields", m) for m in a.metric_fields)]:
            if name not in obs_fields:
                raise SchemaMismatch(f"config key `env.args.{key}`: {name!r} is not a field of "
                                     f"the Observation of {self.label}; its fields: {shown_obs}")

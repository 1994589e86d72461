"""The verifiers EnvServer a process starts for its episodes, and its bridge calls.

`tasks(args)` runs `bridge.py tasks` once in the verifiers environment and returns the
taskset's task data. `VerifiersServer.start()` runs `bridge.py serve` (envs/child_process.py:
its own session, killed with this process) and waits for its "ready ADDRESS" line within
`start_timeout_s`, then checks it with a `health` request; `run()` sends one RunRequest.
A server that exited is started again by `ensure_up()`, at most `restarts` times. A server
that never binds, exits first or answers nothing is one line naming it with the last line it
printed. Every coroutine runs on the host loop (envs/host_loop.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from agent_r1_async.config import ConfigError
from agent_r1_async.envs.child_process import OutputTail, spawn, stop_group
from agent_r1_async.envs.verifiers.args import DEFAULT_PYTHON, VerifiersArgs
from agent_r1_async.wire.envserver import EnvServerClient, EnvServerError

BRIDGE = Path(__file__).with_name("bridge.py")
TOKEN_VAR = "AGENT_R1_ASYNC_ENDPOINT_TOKEN"
"""Where the server's model client reads the actor endpoint's bearer token from."""
_HEALTH_S = 30.0
_EXIT_POLL_S = 1.0
_TASKS_TIMEOUT_S = 600.0


class ServerUnavailable(RuntimeError):
    """The server did not start, exited, or does not answer (one line naming it)."""


def interpreter(args: VerifiersArgs) -> str:
    """The verifiers environment's Python; ConfigError naming the key when it is missing."""
    python = Path(args.python)
    if not python.exists():
        hint = " (`bash scripts/setup.sh` creates it)" if args.python == DEFAULT_PYTHON else ""
        raise ConfigError(f"config key `env.args.python`: {args.python} does not exist{hint}")
    return str(python)


def bridge_env(args: VerifiersArgs, token: str | None = None) -> dict[str, str]:
    """The bridge's environment: ours, `pythonpath` first on PYTHONPATH, no venv of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    paths = [str(Path(p).resolve()) for p in args.pythonpath]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if token:
        env[TOKEN_VAR] = token
    return env


def spec_json(args: VerifiersArgs, max_turns: int, max_concurrent: int = 0) -> str:
    return json.dumps({"env": args.env_data(max_turns), "max_concurrent": max_concurrent or None})


def load_tasks(args: VerifiersArgs, max_turns: int) -> list[dict[str, Any]]:
    """The taskset's tasks (dumped TaskData, in load order), read through the bridge."""
    argv = [interpreter(args), str(BRIDGE), "tasks", spec_json(args, max_turns)]
    try:
        done = subprocess.run(argv, env=bridge_env(args), capture_output=True, text=True,
                              timeout=_TASKS_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ServerUnavailable(f"verifiers taskset {args.taskset!r}: listing its tasks took "
                                f"longer than {_TASKS_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "")
        raise ConfigError(f"config key `env.args.taskset`: verifiers could not load taskset "
                          f"{args.taskset!r} (exit {done.returncode}): {last.strip()[:300]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


class VerifiersServer:
    """One EnvServer of `args`, started by this process (module docstring)."""

    def __init__(self, args: VerifiersArgs, max_turns: int, max_concurrent: int) -> None:
        self.args, self.max_turns, self.max_concurrent = args, max_turns, max_concurrent
        self.label = f"verifiers EnvServer ({args.taskset})"
        self.proc: subprocess.Popen[bytes] | None = None
        self.output: OutputTail | None = None
        self.client: EnvServerClient | None = None
        self.restarted = 0
        self.token: str | None = None
        self._ready = threading.Event()
        self._address = ""
        self._starting: asyncio.Task[None] | None = None

    def _on_line(self, line: str) -> bool:
        if not self._ready.is_set() and line.startswith("ready tcp://"):
            self._address = line.split(None, 1)[1].strip()
            self._ready.set()
            return True
        return False

    async def start(self, token: str | None) -> None:
        self.token = token
        self._ready.clear()
        argv = [interpreter(self.args), str(BRIDGE), "serve",
                spec_json(self.args, self.max_turns, self.max_concurrent)]
        self.proc = spawn(argv, env=bridge_env(self.args, token))
        assert self.proc.stdout is not None
        self.output = OutputTail(self.proc.stdout, "verifiers server", self._on_line)
        deadline = time.monotonic() + self.args.start_timeout_s
        while not self._ready.is_set():
            code = self.proc.poll()
            if code is not None:
                raise ServerUnavailable(f"{self.label} did not start: it exited with code "
                                        f"{code}{self._output_note()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerUnavailable(f"{self.label} did not start: no address within "
                                        f"start_timeout_s={self.args.start_timeout_s:g}"
                                        f"{self._output_note()}")
            await asyncio.sleep(0.05)
        self.client = EnvServerClient(self._address)
        try:
            _, reply = await self.client.request("health", {}, _HEALTH_S)
        except EnvServerError as e:
            self.stop()
            raise ServerUnavailable(f"{self.label} does not answer: {e}{self._output_note()}"
                                    ) from None
        if not reply.get("success", False):
            raise ServerUnavailable(f"{self.label} is unhealthy: {reply.get('error')}")

    async def ensure_up(self, token: str | None) -> None:
        """Start the server if it is not running (at most `restarts` restarts); episodes that
        find it down at once share one start. A server started for another endpoint's token
        (another evaluation in this process) is replaced, not counted as a restart."""
        if self.proc is not None and self.proc.poll() is None and self.client is not None:
            if token == self.token:
                return
            if self._starting is None or self._starting.done():
                self._close_client()
                await asyncio.to_thread(self.stop)
                self.proc = None
        if self._starting is None or self._starting.done():
            self._starting = asyncio.get_running_loop().create_task(self._start_again(token))
        await asyncio.shield(self._starting)

    async def _start_again(self, token: str | None) -> None:
        if self.proc is not None:
            note = self.exit_note()
            if self.restarted >= self.args.restarts:
                raise ServerUnavailable(f"{self.label} {note}; it is not restarted again "
                                        f"(restarts={self.args.restarts} used)")
            self.restarted += 1
            self._close_client()
        await self.start(token)

    async def run(self, payload: dict[str, Any], timeout_s: float,
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(deltas, reply) of one RunRequest; ServerUnavailable when the server exits while it
        runs (noticed within a second), EnvServerError when it times out or answers badly."""
        assert self.client is not None
        request = asyncio.ensure_future(self.client.request("run", payload, timeout_s))
        try:
            while True:
                done, _ = await asyncio.wait({request}, timeout=_EXIT_POLL_S)
                if done:
                    return request.result()
                note = self.exit_note()
                if note:
                    raise ServerUnavailable(f"{self.label} {note}")
        finally:
            if not request.done():
                request.cancel()
                await asyncio.gather(request, return_exceptions=True)

    def exit_note(self) -> str:
        code = self.proc.poll() if self.proc is not None else None
        return "" if code is None else f"exited with code {code}{self._output_note()}"

    def _output_note(self) -> str:
        last = self.output.last() if self.output is not None else ""
        return f"; output: {last}" if last else ""

    def _close_client(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def stop(self) -> None:
        stop_group(self.proc)

    async def aclose(self) -> None:
        self._close_client()
        await asyncio.to_thread(self.stop)

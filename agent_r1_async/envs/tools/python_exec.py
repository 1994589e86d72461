"""`python` tool: run agent-written Python in a fresh, isolated subprocess.

Two modes (`sandbox`, from the python env's `env.args.sandbox`):

`bwrap` (the default): OS isolation by bubblewrap, see `bwrap.py` for exactly what it gives.
The code runs as `nobody` (uid 65534 on the host, never root), in its own user, pid, network
and mount namespaces, on a read-only system with only `/usr`, the interpreter and a
size-limited tmpfs visible; no process it starts outlives the call. Where bwrap is missing or
does not work the tool refuses to start, with an error saying how to install it.

`unsafe_inprocess`: the weaker mode, accepted only when the config asks for it. The code runs
in a plain subprocess (`[unshare -rn] <this python> -I -S`, dropped to `nobody` when that
works) whose only barrier beyond rlimits is the Python audit hook of `_sandbox_boot.py`. An
audit hook is NOT a security boundary: its own locals are reachable from any refusal's
`__traceback__`, several calls are not audited (`signal.pidfd_send_signal`, `_imp` tricks),
and when the caller is root and `nobody` cannot run the interpreter the code runs as root.
Use it only on machines where a hostile program costs nothing.

In both modes the bootstrap (`_sandbox_boot.py`) runs first and sets, with soft == hard (an
unprivileged process cannot raise them): CPU seconds (RLIMIT_CPU, SIGXCPU then SIGKILL one
second later), address space (RLIMIT_AS), size of one written file (RLIMIT_FSIZE), open files
(RLIMIT_NOFILE), processes (RLIMIT_NPROC: binds for uid 65534, not for root), no core dumps;
and installs the audit hook (in `bwrap` mode only as defense in depth: friendlier refusals,
not a boundary). The parent enforces a wall-clock limit (SIGKILL to the child's process group;
bwrap's namespace init then takes every process of the call with it) and output limits (the
head of stdout and the tail of stderr, at most `max_output_bytes` each, kept; the group is
killed once `kill_after_bytes` have been read). The environment is minimal (PATH, LANG,
HOME=TMPDIR=the work dir), stdin is /dev/null. Only the standard library can be imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agent_r1_async.envs.tools import bwrap

SANDBOX_MODES = ("bwrap", "unsafe_inprocess")
"""`bwrap`: OS isolation (the default); `unsafe_inprocess`: rlimits + audit hook only."""
EXIT_MEMORY = 86
"""Exit status the bootstrap uses for an uncaught MemoryError (see _sandbox_boot.py)."""
_BOOT_SOURCE = (Path(__file__).parent / "_sandbox_boot.py").read_text(encoding="utf-8")
_CHUNK = 65536


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits of the `python` tool."""

    cpu_s: int = 2
    """CPU seconds (RLIMIT_CPU soft; SIGKILL one second later)."""
    wall_s: float = 5.0
    """Wall-clock seconds before the process group is killed."""
    memory_mb: int = 512
    """Address space (RLIMIT_AS) in MiB; the interpreter itself needs ~20."""
    file_mb: int = 16
    """Largest file the code may write (RLIMIT_FSIZE), MiB."""
    max_files: int = 256
    """Files/dirs the code may create or open for writing."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    max_output_bytes: int = 16384
    """Bytes kept of stdout (its head) and of stderr (its tail); the rest is marked dropped."""
    kill_after_bytes: int = 1 << 20
    """Total output read before the process is killed as a flood."""
    max_code_bytes: int = 100_000
    """Longer code is not run."""
    max_processes: int = 8
    """RLIMIT_NPROC in `bwrap` mode (its namespace init counts as one)."""
    disk_mb: int = 64
    """Size of the sandbox's tmpfs (`bwrap` mode): all the code may write, in memory."""

    def __post_init__(self) -> None:
        for name in ("cpu_s", "memory_mb", "file_mb", "max_files", "max_open_files",
                     "max_output_bytes", "kill_after_bytes", "max_code_bytes", "max_processes",
                     "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        if not self.wall_s > 0:
            raise ValueError(f"SandboxLimits.wall_s must be > 0, got {self.wall_s!r}")
        if self.kill_after_bytes < self.max_output_bytes:
            raise ValueError("SandboxLimits.kill_after_bytes must be >= max_output_bytes")


@dataclass(frozen=True)
class LaunchPlan:
    """How the child is started: a command prefix and the uid/gid to run as."""

    prefix: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    layers: tuple[str, ...] = field(default=())
    """Which OS layers apply: "netns" (unshare -rn), "nobody" (privilege drop)."""


# ------------------------------------------------------------------------------------------
# Launch probing: which OS layers work on this machine (cached per process).
# ------------------------------------------------------------------------------------------


def _nobody() -> tuple[int, int] | None:
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _works(plan: LaunchPlan) -> bool:
    """Start the interpreter the way `plan` says and check it runs."""
    tmp = tempfile.mkdtemp(prefix="pyexec-probe-")
    try:
        if plan.uid is not None:
            os.chown(tmp, plan.uid, plan.gid if plan.gid is not None else -1)
        cmd = [*plan.prefix, sys.executable, "-I", "-S", "-c", "print('ok')"]
        kw: dict[str, Any] = {}
        if plan.uid is not None:
            kw = {"user": plan.uid, "group": plan.gid, "extra_groups": []}
        out = subprocess.run(cmd, cwd=tmp, env=_base_env(tmp), capture_output=True,
                             timeout=10, check=False, **kw)
        return out.returncode == 0 and out.stdout.strip() == b"ok"
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@functools.cache
def launch_plan(use_namespaces: bool | None = None, drop_privileges: bool | None = None
                ) -> LaunchPlan:
    """The strongest working plan. None = use the layer when it works; True = require it."""
    unshare = shutil.which("unshare")
    nobody = _nobody() if os.geteuid() == 0 else None
    netns = ("netns",)
    candidates = []
    if unshare and use_namespaces is not False and nobody and drop_privileges is not False:
        candidates.append(LaunchPlan((unshare, "-rn"), *nobody, ("netns", "nobody")))
    if unshare and use_namespaces is not False and not drop_privileges:
        candidates.append(LaunchPlan((unshare, "-rn"), layers=netns))
    if nobody and drop_privileges is not False and not use_namespaces:
        candidates.append(LaunchPlan((), *nobody, ("nobody",)))
    if not use_namespaces and not drop_privileges:
        candidates.append(LaunchPlan())
    for plan in candidates:
        if _works(plan):
            return plan
    raise RuntimeError(
        f"python tool: no working launch with use_namespaces={use_namespaces}, "
        f"drop_privileges={drop_privileges} (unshare: {unshare or 'missing'}, "
        f"root: {os.geteuid() == 0})"
    )


def _base_env(tmp: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": tmp,
            "TMPDIR": tmp}


# ------------------------------------------------------------------------------------------
# One run
# ------------------------------------------------------------------------------------------


class _Output:
    """Reads both pipes, keeps the first `cap` bytes of each, kills on a flood."""

    def __init__(self, limits: SandboxLimits, kill: Any) -> None:
        self.limits, self.kill = limits, kill
        self.total = 0
        self.flooded = False

    async def drain(self, stream: asyncio.StreamReader, *, tail: bool) -> tuple[bytes, int]:
        """(kept bytes, bytes seen): the first `cap` bytes, or the last ones if `tail`."""
        cap = self.limits.max_output_bytes
        kept, seen = bytearray(), 0
        while chunk := await stream.read(_CHUNK):
            seen += len(chunk)
            if tail:
                kept += chunk
                if len(kept) > 2 * cap:  # trim now and then: amortized O(bytes)
                    del kept[:-cap]
            elif len(kept) < cap:
                kept += chunk[: cap - len(kept)]
            self.total += len(chunk)
            if self.total > self.limits.kill_after_bytes and not self.flooded:
                self.flooded = True
                self.kill()
        return bytes(kept[-cap:] if tail else kept), seen


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's own process group (pgid == its pid: start_new_session)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _text(data: bytes, seen: int, *, tail: bool) -> tuple[str, bool]:
    text = data.decode("utf-8", errors="replace")
    if seen <= len(data):
        return text, False
    if tail:  # tracebacks end with what matters
        return f"[output truncated: {seen} bytes, last {len(data)} shown]\n" + text, True
    return text + f"\n[output truncated: {seen} bytes, first {len(data)} shown]", True


def _status(rc: int, timed_out: bool, flooded: bool) -> str:
    if timed_out:
        return "timeout"
    if flooded:
        return "output_limit"
    if rc == EXIT_MEMORY:
        return "memory"
    if rc == -signal.SIGXCPU:
        return "timeout"  # the CPU limit
    if rc < 0:
        return "killed"
    return "ok" if rc == 0 else "error"


def _rmtree(path: str) -> None:
    """Remove the temp dir even if the code chmod-ed parts of it unreadable."""

    def fix(func: Any, p: str, exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)


class PythonExecTool:
    """Runs Python code in a sandboxed subprocess; implements the `Tool` protocol."""

    name: ClassVar[str] = "python"
    description: ClassVar[str] = (
        "Run a Python 3 program (standard library only, no network, no files outside the "
        "working directory) and return its stdout and stderr. Print what you need to see."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The complete program."}},
        "required": ["code"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),
        *,
        sandbox: str = "bwrap",
        use_namespaces: bool | None = None,
        drop_privileges: bool | None = None,
        workdir_root: str | None = None,
    ) -> None:
        """`sandbox`: one of SANDBOX_MODES. The other keywords apply to `unsafe_inprocess`."""
        if sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {SANDBOX_MODES}, got {sandbox!r}")
        self.limits, self.sandbox = limits, sandbox
        self.bwrap: bwrap.BwrapPlan | None = None
        if sandbox == "bwrap":
            self.bwrap = bwrap.bwrap_plan()  # RuntimeError saying how to get bwrap
            self.layers: tuple[str, ...] = ("bwrap", "netns", "nobody")
        else:
            self.plan = launch_plan(use_namespaces, drop_privileges)
            self.layers = self.plan.layers
        self.workdir_root = workdir_root

    async def call(self, code: str) -> dict[str, Any]:  # type: ignore[override]
        """Run `code`; returns status, exit_code, stdout, stderr and the flags."""
        if not isinstance(code, str):
            raise TypeError(f"python tool: code must be a str, got {type(code).__name__}")
        if len(code.encode("utf-8", errors="surrogatepass")) > self.limits.max_code_bytes:
            return _result("error", None, "", f"code longer than "
                           f"{self.limits.max_code_bytes} bytes; not run", False, 0.0)
        if self.bwrap is not None:
            return await self._run_bwrap(code, self.bwrap)
        tmp = tempfile.mkdtemp(prefix="pyexec-", dir=self.workdir_root)
        try:
            return await self._run_inprocess(code, tmp)
        finally:
            _rmtree(tmp)

    def _boot_cfg(self, root: str, nproc: int) -> str:
        lim = self.limits
        return json.dumps({"root": root, "cpu_s": lim.cpu_s, "memory_bytes": lim.memory_mb << 20,
                           "file_bytes": lim.file_mb << 20, "max_open_files": lim.max_open_files,
                           "nproc": nproc, "max_files": lim.max_files})

    async def _run_bwrap(self, code: str, plan: bwrap.BwrapPlan) -> dict[str, Any]:
        # a path unique per call: nothing the code writes there exists on the host
        workdir = f"/tmp/pyexec-{uuid.uuid4().hex[:12]}"
        fd = bwrap.code_fd(code)
        try:
            cmd = [*bwrap.bwrap_args(plan, workdir, fd, self.limits.disk_mb << 20),
                   plan.interpreter, "-I", "-S", "-c", _BOOT_SOURCE,
                   self._boot_cfg(workdir, self.limits.max_processes)]
            return await self._supervise(cmd, None, _base_env(workdir),
                                         bwrap.popen_kwargs(plan, fd), signal_base=128)
        finally:
            os.close(fd)

    async def _run_inprocess(self, code: str, tmp: str) -> dict[str, Any]:
        plan = self.plan
        main = os.path.join(tmp, "main.py")
        with open(main, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(code)
        kw: dict[str, Any] = {}
        if plan.uid is not None:
            for p in (tmp, main):
                os.chown(p, plan.uid, plan.gid if plan.gid is not None else -1)
            kw = {"user": plan.uid, "group": plan.gid, "extra_groups": []}
        cmd = [*plan.prefix, sys.executable, "-I", "-S", "-c", _BOOT_SOURCE,
               self._boot_cfg(os.path.realpath(tmp), 1)]
        return await self._supervise(cmd, tmp, _base_env(tmp), kw, signal_base=None)

    async def _supervise(self, cmd: list[str], cwd: str | None, env: dict[str, str],
                         kw: dict[str, Any], *, signal_base: int | None) -> dict[str, Any]:
        """Start `cmd`, drain its output within the limits, kill its group on time-out.

        `signal_base`: bwrap reports a child killed by signal N as exit status 128 + N.
        """
        lim = self.limits
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env, start_new_session=True, **kw,
        )
        out = _Output(lim, lambda: _kill_group(proc))
        assert proc.stdout is not None and proc.stderr is not None
        work = asyncio.gather(
            out.drain(proc.stdout, tail=False), out.drain(proc.stderr, tail=True), proc.wait()
        )
        timed_out = False
        try:
            done, _ = await asyncio.wait({work}, timeout=lim.wall_s)
            if not done:
                timed_out = True
                _kill_group(proc)
            (so, so_n), (se, se_n), rc = await work
        finally:
            if not work.done():  # cancelled by the caller (e.g. ToolEnv's timeout)
                _kill_group(proc)
                await asyncio.wait({work}, timeout=1.0)  # reap it before the dir goes
        if signal_base is not None and signal_base < rc < signal_base + 65:
            rc = signal_base - rc  # 128 + N -> -N, as for a direct child
        stdout, t1 = _text(so, so_n, tail=False)
        stderr, t2 = _text(se, se_n, tail=True)
        status = _status(rc, timed_out, out.flooded)
        return _result(status, rc, stdout, stderr, t1 or t2, time.monotonic() - start)


def _result(status: str, rc: int | None, stdout: str, stderr: str, truncated: bool,
            seconds: float) -> dict[str, Any]:
    return {
        "status": status,
        "exit_code": rc if rc is None or rc >= 0 else None,
        "signal": -rc if rc is not None and rc < 0 else None,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": truncated,
        "timeout": status == "timeout",
        "memory": status == "memory",
        "killed": rc is not None and rc < 0,
        "seconds": round(seconds, 3),
    }


def format_exec_result(result: dict[str, Any]) -> str:
    """A compact text rendering of a `PythonExecTool.call` result for the agent."""
    parts = []
    if result["stdout"]:
        parts.append(result["stdout"].rstrip("\n"))
    if result["stderr"]:
        parts.append("[stderr]\n" + result["stderr"].rstrip("\n"))
    notes = {"timeout": "[stopped: time limit]", "memory": "[stopped: out of memory]",
             "output_limit": "[stopped: too much output]", "killed": "[killed by a signal]",
             "error": f"[exit status {result['exit_code']}]"}
    if result["status"] in notes:
        parts.append(notes[result["status"]])
    return "\n".join(parts) if parts else "[no output]"


__all__ = ["EXIT_MEMORY", "SANDBOX_MODES", "LaunchPlan", "PythonExecTool", "SandboxLimits",
           "format_exec_result", "launch_plan"]

"""A server process an env starts and owns (OpenEnv command servers, verifiers EnvServers).

`spawn(argv)` starts it in a session of its own, through a tiny boot step that sets the
kernel's parent-death signal (Linux: PR_SET_PDEATHSIG, SIGKILL) before it becomes the server,
so a process killed outright leaves no server behind. The signal fires when the *thread* that
started the child dies; env servers are started on the host loop's thread (host_loop.py),
which lives as long as the process. `OutputTail` keeps its last printed lines for error
messages; `stop_group` ends it and its process group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0
TAIL_LINES = 20
# Sets the parent-death signal, then becomes the server (execvp keeps the setting). Run in the
# child after exec, so nothing unsafe runs between fork and exec in this threaded process.
_BOOT = ("import ctypes, os, sys\n"
         "try:\n"
         "    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL\n"
         "except (AttributeError, OSError):\n"
         "    pass\n"
         "if os.getppid() != int(sys.argv[1]):\n"
         "    sys.exit('the process that started this server is gone')\n"
         "os.execvp(sys.argv[2], sys.argv[2:])\n")


def spawn(argv: Sequence[str], cwd: str | None = None,
          env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` as a server owned by this process (module docstring); stdout and stderr
    both go to the returned process's `stdout` pipe."""
    return subprocess.Popen(
        [sys.executable, "-c", _BOOT, str(os.getpid()), *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        cwd=cwd or None, env=dict(env) if env is not None else None, start_new_session=True)


class OutputTail:
    """The last lines a server process printed, read by a daemon thread; `on_line` (if given)
    sees every line first and may consume it (return True) so that it is not kept."""

    def __init__(self, stream: IO[bytes], name: str,
                 on_line: Callable[[str], bool] | None = None) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.name, self.on_line = name, on_line
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True,
                                       name=f"{name}-output")
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in stream:
                line = raw.decode("utf-8", "replace").strip()
                if not line or (self.on_line is not None and self.on_line(line)):
                    continue
                self.lines.append(line[:300])
                log.debug("%s: %s", self.name, line)

    def last(self) -> str:
        self.thread.join(0.5)  # a server that just exited: its last lines are still arriving
        return self.lines[-1] if self.lines else ""


def stop_group(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a started server and its process group (from any thread; idempotent)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_GRACE_S)

"""One JVM per process, shared by every TextWorldExpress game that process plays.

The package's Python class starts a JVM per instance (about 420 MB of RSS with Java's default
heap and collector) and holds one game at a time. Here a process starts one JVM (py4j
gateway, authenticated, on a loopback port) and creates many game objects inside it (the
package's `PythonInterface`, one per episode in flight: pool.py). Its options keep it small:
a bounded heap (`env.args.jvm_heap_mb`), the serial collector and the client compiler
only; measured here: 37 MB at start, 131 MB of RSS with 64 seven-room Cooking games, 172 MB
with 256, against 447 MB for 64 with Java's defaults; a step takes 0.1-0.35 ms either way.

The JVM reads EOF on its stdin when this process exits (even when killed) and exits too. If
it dies while this process lives, the next game started relaunches it (`generation` counts
launches, so a pool drops game objects of a dead JVM).
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

from agent_r1_async.envs.base import EnvError

JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")
"""With `-Xmx<jvm_heap_mb>m`: one thread collects, the client compiler only, small stacks."""


class Jvm:
    """A running JVM with the package's classes and the gateway to it."""

    def __init__(self, heap_mb: int, generation: int) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from textworld_express.constants import BASEPATH, JAR_PATH

        self.generation = generation
        self.heap_mb = heap_mb
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        try:
            port, token, proc = launch_gateway(
                classpath=JAR_PATH, cwd=BASEPATH, die_on_exit=True, enable_auth=True,
                javaopts=[f"-Xmx{heap_mb}m", *JVM_OPTIONS], redirect_stderr=self.stderr,
                return_proc=True,
            )
        except Exception as e:  # java missing or broken, bad options: no port was printed
            raise EnvError(f"textworld_express: the JVM did not start: {type(e).__name__}: "
                           f"{e}{self._last_output()}") from None
        self.proc = proc
        self.gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=token, auto_field=True),
            java_process=proc,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def new_game(self) -> Any:
        """A fresh game object (`textworldexpress.runtime.PythonInterface`) in this JVM."""
        return self.gateway.jvm.textworldexpress.runtime.PythonInterface()

    def failure(self) -> str:
        """Why calls fail: the JVM's exit code and last output line, or "" while it runs."""
        code = self.proc.poll()
        if code is None:
            return ""
        self.detach()
        return f"the JVM exited with code {code}{self._last_output()}"

    def detach(self) -> None:
        """Stop talking to a dead JVM: its object proxies, collected later, then send nothing
        (py4j would try to reach it and log a traceback for each one)."""
        client = self.gateway._gateway_client
        client.is_connected = False
        client.close()

    def rss_mb(self) -> float:
        """The JVM's resident memory in MiB (Linux; 0.0 where /proc is absent)."""
        status = Path(f"/proc/{self.proc.pid}/status")
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def _last_output(self) -> str:
        lines = [ln.strip() for ln in self.stderr if ln.strip()]  # newest first
        return f"; last output: {lines[0][:200]}" if lines else ""


_lock = threading.Lock()
_jvm: Jvm | None = None
_launches = 0


def shared_jvm(heap_mb: int) -> Jvm:
    """This process's JVM, launched on first use or when the last one died. The first launch
    sets the heap; later callers share that JVM whatever they ask for."""
    global _jvm, _launches
    with _lock:
        if _jvm is None or not _jvm.alive():
            if _jvm is not None:
                _jvm.detach()
            _launches += 1
            _jvm = Jvm(heap_mb, _launches)
        return _jvm


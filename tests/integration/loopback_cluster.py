"""A multi-node Ray cluster on this machine's loopback addresses, for the cluster tests.

Each node is one `ray start --block` in a process group of its own, on its own address in
127.0.0.0/8 (the head on 127.0.0.2: Ray rewrites 127.0.0.1 to the machine's outward address)
with its own CPUs, custom resources and temp directory; Ray token authentication is on with a
fresh token, and Ray's health checks run every second. Removing a node SIGKILLs its process group: the raylet and every process Ray
started on it (the workers stay in the group), which is what losing a machine does. Only the
processes this fixture started are ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
READY = "This command will now block forever"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LoopbackCluster:
    """`nodes`: per node (the first is the head), {"cpus": n, **custom resources}."""

    def __init__(self, nodes: list[dict[str, float]]) -> None:
        self.specs = nodes
        self.dir = Path(tempfile.mkdtemp(prefix="ar1-nodes-"))  # 0700; Ray's sockets live here
        self.ips = [f"127.0.0.{i + 2}" for i in range(len(nodes))]
        self.port = free_port(self.ips[0])
        self.address = f"{self.ips[0]}:{self.port}"
        # Ray marks a node dead after `failure_threshold` missed health checks, one every
        # `period_ms` (defaults: 5 x 3 s); 3 x 1 s here, so a drill's node loss shows quickly.
        self.env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                        RAY_USAGE_STATS_ENABLED="0", RAY_health_check_period_ms="1000",
                        RAY_health_check_failure_threshold="3")
        self.env.pop("RAY_ADDRESS", None)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, timeout_s: float = 90.0) -> LoopbackCluster:
        """Head first, then each worker once the one before it is up (two raylets starting at
        once on one machine race for the same ports)."""
        for i, (ip, spec) in enumerate(zip(self.ips, self.specs, strict=True)):
            resources = {k: v for k, v in spec.items() if k != "cpus"}
            args = [RAY, "start", "--block", "--node-ip-address", ip,
                    "--num-cpus", str(int(spec.get("cpus", 1))),
                    "--resources", json.dumps(resources), "--temp-dir", str(self.dir / ip),
                    "--disable-usage-stats"]
            args += (["--head", "--port", str(self.port), "--include-dashboard", "false"] if i == 0
                     else ["--address", self.address])
            log = open(self.dir / f"{ip}.log", "wb")  # noqa: SIM115 (the process keeps it)
            self.procs[ip] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                              env=self.env, start_new_session=True)
            self._wait_ready(ip, timeout_s)
        return self

    def _wait_ready(self, ip: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        log = self.dir / f"{ip}.log"
        while READY not in log.read_text(errors="replace"):
            if self.procs[ip].poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ray node {ip} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)

    def kill_node(self, ip: str) -> None:
        """Every process of node `ip` at once (SIGKILL to its process group)."""
        assert ip != self.ips[0], "the head holds the cluster's state: lose a worker node"
        proc = self.procs.pop(ip)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for ip in reversed(list(self.procs)):
            proc = self.procs.pop(ip)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

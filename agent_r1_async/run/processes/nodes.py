"""Which Ray node runs which process, and which nodes are lost.

Inside a process: this node's address (`node_ip`, `where`), an endpoint bound to 0.0.0.0 as
the other nodes reach it (`advertised`), `launch.bind_host: node` as this node's address
(`on_this_node`), and `Host`, what the launcher asks every process it hosts (its pid, its
node).

On a cluster of several nodes the launch prints one placement line when its processes are up
(`placement_line`), and one line per node lost (`NodeWatch` polls Ray's node table; a node
is lost when Ray marks it dead: its raylet stopped answering, which kills every process on
it). Each role's own supervision restarts what ran there (buffer_group.py, learner_group.py,
actor_group.py); these lines only say where, so an operator sees one cause instead of several
deaths.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import msgspec

from agent_r1_async.config import RunConfig

Where = dict[str, str]
"""A process's node: {"node_id": Ray's node id, "ip": its address} (`where`)."""


def node_ip() -> str:
    """This node's address as the other nodes of the Ray cluster reach it."""
    import socket

    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # not inside Ray: fall back to the host name's address
        return socket.gethostbyname(socket.gethostname())


def where() -> Where:
    """This process's Ray node: {"node_id": ..., "ip": ...} (the launch's placement line and
    its node-loss events)."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "ip": node_ip()}


def advertised(endpoint: str, bind_host: str) -> str:
    """A socket bound to 0.0.0.0 is reached through this node's address."""
    if bind_host not in ("0.0.0.0", "*"):
        return endpoint
    return f"tcp://{node_ip()}:{endpoint.rsplit(':', 1)[1]}"


def on_this_node(cfg: RunConfig) -> RunConfig:
    """`cfg` as this process uses it: `launch.bind_host: node` becomes this node's address,
    so every socket it binds is on its own node (a cluster of several nodes)."""
    if cfg.launch.bind_host != "node":
        return cfg
    launch = msgspec.structs.replace(cfg.launch, bind_host=node_ip())
    return msgspec.structs.replace(cfg, launch=launch)


def pin_threads(num_cpus: float) -> None:
    """This process's torch and OpenMP threads: the CPUs Ray reserved for it on its node."""
    n = max(1, math.ceil(num_cpus))
    os.environ["OMP_NUM_THREADS"] = str(n)
    import torch

    torch.set_num_threads(n)


class Host:
    """What the launcher asks every process it hosts: its pid (RUN_DIR/*.pid, drills) and its
    node."""

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> Where:
        return where()


def alive_nodes(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Ray's node table (`ray.nodes()`) -> {node id: address} of the nodes alive."""
    return {n["NodeID"]: n["NodeManagerAddress"] for n in nodes if n.get("Alive")}


def placement_line(where: dict[str, Where]) -> str:
    """"buffer on 127.0.0.2; learner on 127.0.0.3; actor-0, actor-1 on 127.0.0.4": the
    processes by node, in the order the roles were started."""
    by_node: dict[str, list[str]] = {}
    for role, w in where.items():
        by_node.setdefault(w["ip"], []).append(role)
    return "; ".join(f"{', '.join(roles)} on {ip}" for ip, roles in by_node.items())


class NodeWatch:
    """Where each process runs (`place`), and `lost()`: the nodes alive at the previous look
    and dead now, once each, with every process that ran there since the launch started
    (one restarted elsewhere before Ray marked the node dead included: Ray notices a dead
    node only after its health checks fail, `RAY_health_check_*`, 5 x 3 s by default).
    `nodes` returns Ray's node table; a look is taken at most every `every_s`."""

    def __init__(self, nodes: Callable[[], list[dict[str, Any]]], every_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nodes, self.every_s, self.clock = nodes, every_s, clock
        self.alive = alive_nodes(nodes())
        self.where: dict[str, Where] = {}
        """Each process's node now, by role, in the order the roles were placed."""
        self._ran: dict[str, list[str]] = {}
        self._next = clock() + every_s

    def place(self, role: str, where: Where) -> None:
        self.where[role] = where
        ran = self._ran.setdefault(where["node_id"], [])
        if role not in ran:
            ran.append(role)

    def lost(self) -> list[tuple[str, list[str]]]:
        """[(address, processes that ran there)] of each node lost since the previous look."""
        if self.clock() < self._next:
            return []
        self._next = self.clock() + self.every_s
        now = alive_nodes(self.nodes())
        gone = [(node_id, ip) for node_id, ip in self.alive.items() if node_id not in now]
        self.alive = now
        return [(ip, self._ran.pop(node_id, [])) for node_id, ip in gone]

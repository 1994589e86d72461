"""Which Ray node runs which process, and which nodes are lost.

On a cluster of several nodes the launch prints one placement line when its processes are up
(`placement_line`), and one line per node lost (`NodeWatch` polls Ray's node table; a node
is lost when Ray marks it dead: its raylet stopped answering, which kills every process on
it). Each role's own supervision restarts what ran there (run/processes/supervisor.py); these
lines only say where, so an operator sees one cause instead of several deaths.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Where = dict[str, str]
"""A process's node: {"node_id": Ray's node id, "ip": its address} (hosts.where)."""


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

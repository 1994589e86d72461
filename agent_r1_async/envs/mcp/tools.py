"""MCP tools as `Tool`s of one episode, and the episode's leases on its servers
(`EpisodeLeases`)."""

from __future__ import annotations

import weakref
from typing import Any

from agent_r1_async.envs import host_loop
from agent_r1_async.envs.mcp.server import Lease, McpServer


class EpisodeLeases:
    """One episode's leases on the servers; `failure` names the first server lost."""

    def __init__(self, servers: list[McpServer]) -> None:
        self.leases = {id(s): (s, Lease()) for s in servers}

    def lease(self, server: McpServer) -> Lease:
        return self.leases[id(server)][1]

    @property
    def failure(self) -> str:
        return next((lease.failure for _, lease in self.leases.values() if lease.failure), "")

    async def _release(self) -> None:
        old, self.leases = self.leases, {k: (s, Lease()) for k, (s, _) in self.leases.items()}
        for server, lease in old.values():
            await server.release(lease)

    async def close(self) -> None:
        """End the episode's own sessions (from any loop)."""
        await host_loop.on_host(self._release())

    def close_soon(self) -> None:
        """`close()` without waiting (from any thread, e.g. a finalizer)."""
        host_loop.submit(self._release())

    def close_when_collected(self, owner: object) -> None:
        """Close the sessions when `owner` (the episode's env) is garbage collected: an episode
        that ends by an error or a cut never reaches its last step."""
        fin = weakref.finalize(owner, self.close_soon)
        fin.atexit = False  # at exit the host closes every session itself


class McpTool:
    """One tool of one MCP server, bound to an episode (implements `Tool`)."""

    def __init__(self, server: McpServer, spec: Any, name: str, leases: EpisodeLeases) -> None:
        self.server, self.remote_name, self.leases = server, spec.name, leases
        self.name = name
        self.description = spec.description or spec.title or ""
        self.parameters: dict[str, Any] = dict(spec.input_schema or {"type": "object"})

    async def call(self, **arguments: Any) -> str:
        lease = self.leases.lease(self.server)
        return await host_loop.on_host(self.server.call(lease, self.remote_name, arguments))

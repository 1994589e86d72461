"""MCP servers as tools: the `mcp_tools` env (env.py) and what it is built from.

- args.py: `env.args` (servers, their limits, the task function);
- host.py: the per-process event loop that owns every MCP session;
- connection.py: one session (a stdio server process or an HTTP session);
- server.py: one server's sessions and limits (concurrency, timeout, reconnect, size cap);
- results.py: a call result as the agent's text; tools.py: `Tool`s bound to an episode.

The `mcp` SDK is imported only when a session opens.
"""

from agent_r1_async.envs.mcp.args import McpServerArgs, McpToolsArgs
from agent_r1_async.envs.mcp.env import McpServerUnavailable, McpToolEnv, McpToolsEnv

__all__ = ["McpServerArgs", "McpServerUnavailable", "McpToolEnv", "McpToolsArgs", "McpToolsEnv"]

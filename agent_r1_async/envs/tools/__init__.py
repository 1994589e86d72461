"""Tools that envs compose into a `ToolDomain` (see envs/toolenv.py)."""

from agent_r1_async.envs.tools.python_exec import (
    PythonExecTool,
    SandboxLimits,
    format_exec_result,
)

__all__ = ["PythonExecTool", "SandboxLimits", "format_exec_result"]

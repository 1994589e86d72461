"""Agent-side API: Env/Tool protocols, the ToolEnv, rewards and the env registry.

Built-in envs (`multihop_qa`, `arithmetic`) register on first registry lookup, so importing
this package stays light (no BM25 / corpus loading).
"""

from agent_r1_async.envs.base import Env, EnvError, Message, Observation, StepResult, Task, Tool
from agent_r1_async.envs.registry import (
    EnvSpec,
    UnknownEnvError,
    get_env_spec,
    list_envs,
    register_env,
)
from agent_r1_async.envs.toolenv import (
    CallOutcome,
    EpisodeState,
    Score,
    Shaping,
    ToolCall,
    ToolDomain,
    ToolEnv,
    parse_tool_calls,
    tool_call_text,
)

__all__ = [
    "CallOutcome",
    "Env",
    "EnvError",
    "EnvSpec",
    "EpisodeState",
    "Message",
    "Observation",
    "Score",
    "Shaping",
    "StepResult",
    "Task",
    "Tool",
    "ToolCall",
    "ToolDomain",
    "ToolEnv",
    "UnknownEnvError",
    "get_env_spec",
    "list_envs",
    "parse_tool_calls",
    "register_env",
    "tool_call_text",
]

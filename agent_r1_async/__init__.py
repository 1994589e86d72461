"""agent-r1-async: asynchronous off-policy RL for multi-step tool-using LLM agents."""

__version__ = "0.1.0"

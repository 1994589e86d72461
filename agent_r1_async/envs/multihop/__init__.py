"""Built-in multi-hop QA with BM25 search (`multihop_qa`): env, loaders, synthetic generator."""

from agent_r1_async.envs.multihop.env import MultihopArgs, MultihopDomain, MultihopQAEnv
from agent_r1_async.envs.multihop.search import BM25Index, SearchTool

__all__ = ["BM25Index", "MultihopArgs", "MultihopDomain", "MultihopQAEnv", "SearchTool"]

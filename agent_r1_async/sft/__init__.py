"""Supervised warm start: demonstrations in the actors' step layout, trained by the learner."""

from agent_r1_async.sft.train import run_sft

__all__ = ["run_sft"]

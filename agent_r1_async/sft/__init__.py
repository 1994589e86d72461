"""Supervised warm start (library): demonstrations in the actors' step layout, trained by the
learner's own trainer. The `sft` command that drives it is `agent_r1_async.run.sft`."""

from agent_r1_async.sft.train import train_stage

__all__ = ["train_stage"]

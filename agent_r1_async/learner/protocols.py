"""The learner's two seams, as Protocols: where its batches come from, and what trains on them.

`Learner` (loop.py) calls exactly these members and nothing else on them, so anything that
has them can stand in: a `BufferClient` (the real source), a test's fake source, the
benchmark's `SleepTrainer`. `tests/unit/test_protocols.py` checks the real classes and every
fake against these signatures, so a stand-in that drifts fails a test, not a run.

Checkpoints (`checkpoint.save_checkpoint` / `load_trainer_state`) read the trainer's model and
optimizer as well: they need a real `PolicyTrainer`, not just a `Trainer`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from agent_r1_async.learner.batching import MicroBatch
from agent_r1_async.wire.messages import SampleBatch


@runtime_checkable
class SampleSource(Protocol):
    """Batches of whole groups for the learner (`wire.buffer_client.BufferClient`)."""

    def sample(self, num_groups: int, learner_version: int, timeout_s: float,
               failed_episodes: int = 0) -> SampleBatch:
        """A batch of `num_groups` groups, or `ready=False` after waiting up to `timeout_s`;
        with up to `failed_episodes` failed episodes to show (`SampleBatch.failed`)."""
        ...

    def set_version(self, version: int) -> None:
        """The learner's policy version moved to `version` (staleness is counted from it)."""
        ...


@runtime_checkable
class Trainer(Protocol):
    """The policy under optimization (`learner.trainer.PolicyTrainer`)."""

    pad_id: int
    """Token id that pads micro-batches."""
    publish_dtype: torch.dtype
    """The dtype the engines serve: published weights are cast to it."""

    def needs_proximal_pass(self, epochs: int) -> bool:
        """Whether `proximal_pass` must run before `epochs` optimizer steps on one batch."""
        ...

    def proximal_pass(self, mbs: list[MicroBatch]) -> None:
        """Fill each micro-batch's proximal log-probs (and values, reference) under no_grad."""
        ...

    def optimize(self, mbs: list[MicroBatch], version: int | None = None,
                 counts: tuple[int, int] | None = None) -> dict[str, float]:
        """One optimizer step over all micro-batches (`version`: the proximal policy's;
        `counts`: the whole batch's steps and action tokens, the loss's denominators, when the
        micro-batches leave some out); returns its metrics."""
        ...

    def published_state_dict(self, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
        """The weights actors load (LoRA merged into the base)."""
        ...

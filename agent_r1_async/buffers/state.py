"""What a buffer snapshot holds: `BufferState`, everything needed to resume a buffer without
losing an accepted episode (`EpisodeBuffer.state` / `restore`; written and verified on disk
by buffers/snapshot.py)."""

from __future__ import annotations

import msgspec

from agent_r1_async.buffers.assembly import OpenGroup
from agent_r1_async.wire.messages import Group


class StoredState(msgspec.Struct, array_like=True, gc=False):
    group: Group
    times_sampled: int


class BufferState(msgspec.Struct, array_like=True, gc=False):
    """Everything needed to resume a buffer without losing an accepted episode."""

    learner_version: int
    stored: list[StoredState]
    assembling: list[OpenGroup]
    accepted: int
    in_flight: list[tuple[str, str, bool]]
    limiter: tuple[float, int, int]
    drops: dict[str, int]
    staleness_hist: dict[int, int]
    records: int
    sampled_groups: int
    lengths: dict[str, int] = {}
    """The length ledger's counts (`LengthLedger.export`)."""

"""A learner restarted from an older checkpoint gives back the admission budget of its lost
updates (found by the kill drill: the run stalled, capacity 0, until a credit expired)."""

from __future__ import annotations

from agent_r1_async.buffers.buffer import TrajectoryBuffer
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from tests.fakes.clock import FakeClock
from tests.fakes.records import group_records


def _accept(buf: TrajectoryBuffer, n: int, version: int) -> None:
    for gid in buf.grant("a0", n).group_ids:
        for rec in group_records(gid, [0.0, 1.0], version=version):
            buf.ingest(rec)


def test_a_learner_rewound_to_its_checkpoint_gets_the_budget_of_its_lost_updates_back():
    # max_staleness 1, batch_groups 2: accepted + in flight <= (1 + v + 1) x 2; oldest first,
    # so no group grows stale.
    buf = TrajectoryBuffer(BufferConfig(max_staleness=1, sampling="fifo", gc_freeze=False),
                           AlgorithmConfig(group_size=2, batch_groups=2), FakeClock())
    _accept(buf, 4, version=0)  # the whole v0 budget: (1 + 0 + 1) x 2 = 4
    assert buf.admission.capacity() == 0
    _sample(buf, 0)  # update 1 (checkpointed): 2 trained, 2 ready
    assert buf.admission.capacity() == 2  # (1 + 1 + 1) x 2 - 4
    _accept(buf, 2, version=1)
    _sample(buf, 1)  # updates 2, 3: 4 more trained, none ready
    _sample(buf, 2)
    # v3: 6 accepted, all trained; (1 + 3 + 1) x 2 - 6 = 4 may start.
    assert (buf.admission.accepted, len(buf.store), buf.admission.capacity()) == (6, 0, 4)

    # The learner dies and restarts from its checkpoint at v1: updates 2, 3 are lost, and the
    # 4 groups they trained on are gone. In its lineage 2 groups are trained, none ready:
    # (1 + 1 + 1) x 2 - 2 = 4 may start. Counting the lost 4 as accepted would leave
    # 6 - 6 = 0: nothing ready, nothing may start, the run stalls.
    buf.set_version(1)
    assert (buf.admission.accepted, buf.admission.capacity()) == (2, 4)
    _accept(buf, 2, version=1)
    _sample(buf, 1)  # the redone update 2


def _sample(buf: TrajectoryBuffer, version: int) -> None:
    """The learner at `version` trains one batch of 2 groups and moves to version + 1."""
    batch, why = buf.try_sample(2, learner_version=version)
    assert batch is not None and len(batch.groups) == 2, why
    buf.set_version(version + 1)

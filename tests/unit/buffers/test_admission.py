"""Admission control (buffers/admission.py): accepted + in_flight <= (max_staleness + version
+ 1) × batch_groups; and a learner restarted from an older checkpoint gives back the admission
budget of its lost updates (found by the kill drill: the run stalled, capacity 0, until a
credit expired)."""

import pytest

from agent_r1_async.buffers.admission import AdmissionControl
from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from tests.fakes.clock import FakeClock, FakeVersion
from tests.fakes.records import group_records


def _control(max_staleness: int = 2, batch_groups: int = 4, timeout: float = 600.0):
    clock, version = FakeClock(), FakeVersion(0)
    ctl = AdmissionControl(max_staleness, batch_groups, version, clock, timeout)
    return ctl, clock, version


def test_credits_follow_the_formula() -> None:
    ctl, _, version = _control()
    # v=0: (2 + 0 + 1) × 4 = 12 groups may be accepted or in flight.
    assert ctl.capacity() == 12
    first = ctl.grant("a0", 5)
    assert len(first) == 5 and len(set(first)) == 5
    assert len(ctl.grant("a1", 10)) == 7  # only 12 - 5 left
    assert ctl.capacity() == 0 and ctl.grant("a0", 1) == []
    for gid in first:  # 5 complete: accepted 5, in flight 7 -> still 12
        ctl.on_record(gid, "a0")
        ctl.on_accepted(gid)
    assert (ctl.accepted, ctl.in_flight, ctl.capacity()) == (5, 7, 0)
    version.v = 1  # (2 + 1 + 1) × 4 = 16; accepted max(5, 1 × 4) = 5 -> 16 - 5 - 7 = 4
    assert ctl.capacity() == 4


def test_dropped_groups_release_their_credit_without_counting_as_accepted() -> None:
    ctl, _, _ = _control()
    gid = ctl.grant("a0", 1)[0]
    ctl.on_record(gid, "a0")
    ctl.on_dropped(gid)
    assert (ctl.accepted, ctl.in_flight, ctl.capacity()) == (0, 0, 12)


def test_unused_credits_expire_after_the_timeout() -> None:
    ctl, clock, _ = _control(timeout=600.0)
    unused, started = ctl.grant("a0", 2)
    ctl.on_record(started, "a0")
    clock.advance(599.0)
    assert ctl.expire() == []
    clock.advance(2.0)  # 601 s after the grant: the never-started credit is released
    assert ctl.expire() == [unused]
    assert ctl.in_flight == 1  # the started group is assembly's to expire, not admission's


def test_group_ids_are_minted_by_grant_alone() -> None:
    ctl, _, _ = _control()
    granted = ctl.grant("a0", 2)
    ctl.on_record(granted[0], "a0")  # a granted id: its credit is used, nothing new tracked
    assert ctl.in_flight == 2 and ctl.unbudgeted == 0
    # An id the buffer never minted (the buffer refuses its records as `ungranted` first) is
    # counted and takes no credit: a foreign sender cannot fill the admission budget.
    ctl.on_record("my-own-id", "a0")
    assert ctl.in_flight == 2 and ctl.unbudgeted == 1
    ctl.on_accepted("my-own-id")
    assert (ctl.accepted, ctl.in_flight) == (1, 2)
    # 12 - accepted 1 - in flight 2 (granted[0] started, granted[1] still unstarted)
    assert ctl.capacity() == 9


def test_version_jump_after_resume_does_not_open_a_flood_of_credits() -> None:
    ctl, _, version = _control()
    # A learner resumed at version 50 talks to a fresh buffer (accepted = 0). Without the floor
    # the budget would be (2 + 50 + 1) × 4 = 212 credits; with accepted floored at 50 × 4 = 200
    # it is 212 - 200 = 12 = (max_staleness + 1) × batch_groups.
    version.v = 50
    assert ctl.capacity() == 12


def test_restore_then_version_jump() -> None:
    ctl, clock, version = _control()
    # Snapshot of a buffer that accepted 210 groups and had 2 in flight, learner at 50.
    ctl.restore(210, [("g-a", "a0", True), ("g-b", "a1", False)])
    version.v = 50
    assert ctl.capacity() == 0  # 212 - max(210, 200) - 2
    version.v = 53  # the learner moved 3 versions while the buffer was down
    # (2 + 53 + 1) × 4 = 224; accepted max(210, 212) = 212; in flight 2 -> 10
    assert ctl.capacity() == 10
    clock.advance(601.0)  # restored unstarted credits get a fresh timeout, then expire
    assert ctl.expire() == ["g-b"]


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="batch_groups"):
        AdmissionControl(2, 0, FakeVersion(), FakeClock(), 1.0)


def test_discarded_groups_return_their_budget():
    # max_staleness 1, batch 2, version 0: budget (1 + 0 + 1) × 2 = 4 groups.
    from agent_r1_async.buffers.admission import AdmissionControl

    adm = AdmissionControl(1, 2, version_source=lambda: 0, clock=lambda: 0.0,
                           episode_timeout_s=10.0)
    ids = adm.grant("a", 10)
    assert len(ids) == 4 and adm.capacity() == 0
    for gid in ids:
        adm.on_record(gid, "a")
        adm.on_accepted(gid)
    assert adm.capacity() == 0
    adm.on_discarded()  # one accepted group dropped as stale before training
    adm.on_discarded()
    assert adm.capacity() == 2  # 4 − (4 − 2) − 0


def test_synchronous_mode_reopens_exactly_one_batch_per_version() -> None:
    """max_staleness 0 (configs/sync.yaml), batch 2: (0 + v + 1) × 2. v0: 2 credits, then
    none until the learner trains them; each version change opens exactly 2 more, for as
    long as the run goes (what a stalled synchronous launch would have to violate)."""
    ctl, _, version = _control(max_staleness=0, batch_groups=2)
    for v in range(4):
        version.v = v
        assert ctl.capacity() == 2, v
        granted = ctl.grant("a0", 4)  # an actor asks for its 4 free slots: gets 2
        assert len(granted) == 2
        for gid in granted:
            ctl.on_record(gid, "a0")
            ctl.on_accepted(gid)
        assert (ctl.accepted, ctl.capacity(), ctl.grant("a0", 4)) == (2 * (v + 1), 0, [])


def _accept(buf: EpisodeBuffer, n: int, version: int) -> None:
    for gid in buf.grant("a0", n).group_ids:
        for rec in group_records(gid, [0.0, 1.0], version=version):
            buf.ingest(rec)


def test_a_learner_rewound_to_its_checkpoint_gets_the_budget_of_its_lost_updates_back():
    # max_staleness 1, batch_groups 2: accepted + in flight <= (1 + v + 1) x 2; oldest first,
    # so no group grows stale.
    buf = EpisodeBuffer(BufferConfig(max_staleness=1, sampling="fifo", gc_freeze=False),
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


def _sample(buf: EpisodeBuffer, version: int) -> None:
    """The learner at `version` trains one batch of 2 groups and moves to version + 1."""
    batch, why = buf.try_sample(2, learner_version=version)
    assert batch is not None and len(batch.groups) == 2, why
    buf.set_version(version + 1)

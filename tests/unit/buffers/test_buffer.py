"""Only granted actors may ingest, and stats are keyed by authenticated identity.
Buffer logic only (no sockets), fake clock; `sender` is what the transport's `.user_id` hands
the service (the peer's CurveZMQ identity, None without CurveZMQ)."""

from __future__ import annotations

import msgspec

from agent_r1_async.buffers.buffer import TrajectoryBuffer
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.messages import ActorStats
from tests.fakes.clock import FakeClock
from tests.fakes.records import group_records, step


def _buffer(bounds: RecordBounds | None = None, **kw: object) -> TrajectoryBuffer:
    cfg = BufferConfig(**{"spi_tolerance": 100.0, **kw})  # type: ignore[arg-type]
    return TrajectoryBuffer(cfg, AlgorithmConfig(group_size=2, batch_groups=1), FakeClock(),
                            bounds=bounds)


def test_records_of_ungranted_groups_are_refused_and_take_no_credit() -> None:
    """4 well-formed StepRecords for groups nobody granted would take every credit
    (budget (max_staleness 3 + version 0 + 1) x batch_groups 1 = 4) and stall the run
    until episode_timeout_s: they are refused and hold none."""
    buf = _buffer(max_staleness=3)
    for i in range(4):
        buf.ingest(step(f"x{i}-e0", f"x{i}", 0))
    assert buf.drops["invalid_record/ungranted"] == 4 and buf.drops["invalid_record"] == 4
    assert buf.admission.in_flight == 0 and buf.assembler.groups_assembling == 0
    assert buf.nbytes == 0  # nothing of theirs is kept
    grant = buf.grant("a0", 4)
    assert grant.groups == 4 and grant.reason == ""


def test_a_group_granted_to_one_actor_is_refused_from_another() -> None:
    buf = _buffer(min_group_episodes=2)
    gid = buf.grant("a0", 1).group_ids[0]
    for r in group_records(gid, [0.0, 1.0]):  # the same records, as actor a1 says it sent them
        buf.ingest(msgspec.structs.replace(r, actor_id="a1"))
    assert buf.drops["invalid_record/ungranted"] == 6  # 2 episodes x (2 steps + end)
    assert buf.assembler.groups_assembling == 0 and buf.admission.owner(gid) == "a0"
    for r in group_records(gid, [0.0, 1.0]):  # a0's own records still complete its group
        buf.ingest(r)
    assert [e.group.group_id for e in buf.store.entries()] == [gid]


def test_an_authenticated_sender_may_only_send_its_own_records() -> None:
    buf = _buffer()
    gid = buf.grant("a0", 1).group_ids[0]
    recs = group_records(gid, [0.0, 1.0])
    buf.ingest(recs[0], sender="a1")  # a1's key, a0's actor_id: spoofed
    buf.ingest(recs[0], sender="learner")
    assert buf.drops["invalid_record/identity"] == 2
    assert buf.assembler.groups_assembling == 0  # a0's group untouched
    for r in recs:
        buf.ingest(r, sender="a0")
    assert buf.drops["invalid_record"] == 2 and len(buf.store) == 1


def test_late_records_of_a_closed_group_stay_late_not_ungranted() -> None:
    buf = _buffer()
    gid = buf.grant("a0", 1).group_ids[0]
    recs = group_records(gid, [0.0, 1.0])
    for r in recs:
        buf.ingest(r)
    buf.ingest(recs[0])  # after the group completed and released its credit
    assert buf.assembler.drops["late_record"] == 1
    assert buf.drops["invalid_record"] == 0


def _stats(actor_id: str, tokens_per_s: float) -> ActorStats:
    return ActorStats(actor_id=actor_id, time=1.0, policy_version=0, tokens_per_s=tokens_per_s,
                      episodes_per_s=1.0, gen_time_s=1.0, env_time_s=1.0, episodes_in_flight=1,
                      episodes_done=1, episodes_failed=0)


def test_stats_are_keyed_by_the_authenticated_identity() -> None:
    """The drill: a spoofed `actor-0` overwrote the real one's stats (5e11 tok/s shown)."""
    buf = _buffer(RecordBounds(max_group_size=2, max_actors=2))
    buf.ingest(_stats("actor-0", 120.0), sender="actor-0")
    buf.ingest(_stats("actor-0", 9e6), sender="actor-1")  # actor-1's key says actor-0
    buf.ingest(_stats("learner", 1.0), sender="learner")  # the learner is no actor
    assert buf.drops["invalid_stats/identity"] == 2
    assert {k: v.tokens_per_s for k, v in buf.actor_stats.items()} == {"actor-0": 120.0}
    buf.ingest(_stats("actor-0", 9e6))  # no CurveZMQ (sender None): the message's word stands
    assert buf.actor_stats["actor-0"].tokens_per_s == 9e6

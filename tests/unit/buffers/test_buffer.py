"""Only granted actors may ingest, and stats are keyed by authenticated identity.
Buffer logic only (no sockets), fake clock; `sender` is what the transport's `.user_id` hands
the service (the peer's CurveZMQ identity, None without CurveZMQ)."""

from __future__ import annotations

import msgspec

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.messages import ActorStats
from tests.fakes.clock import FakeClock
from tests.fakes.records import episode_records, group_records, step


def _buffer(bounds: RecordBounds | None = None, **kw: object) -> EpisodeBuffer:
    cfg = BufferConfig(**{"spi_tolerance": 100.0, **kw})  # type: ignore[arg-type]
    return EpisodeBuffer(cfg, AlgorithmConfig(group_size=2, batch_groups=1), FakeClock(),
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


def test_the_group_size_bound_is_the_algorithm_s_whatever_the_bounds_say() -> None:
    """One number for the group size: `algorithm.group_size` (2 here) bounds an EpisodeEnd's
    `group_size` even when the bounds handed in leave it unchecked (0) or name another."""
    for bounds in (None, RecordBounds(vocab_size=1000), RecordBounds(max_group_size=5)):
        buf = _buffer(bounds)
        assert buf.group_size == 2 and buf.bounds.max_group_size == 2
        gid = buf.grant("a0", 1).group_ids[0]
        for r in episode_records(f"{gid}-e0", gid, group_size=3):
            buf.ingest(r)
        assert buf.drops["invalid_record/group_size"] == 1


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


def test_reclaim_gives_back_an_actors_credits_and_half_built_groups_at_once() -> None:
    """A silent actor's credits starved the healthy one until episode_timeout_s (600 s) in a
    drill; reclaiming them frees the budget at once. Budget by hand: (max_staleness 3 +
    version 0 + 1) x batch_groups 1 = 4 credits."""
    buf = _buffer(max_staleness=3, min_group_episodes=1)
    g0, g1, g2 = buf.grant("a1", 3).group_ids
    (g3,) = buf.grant("a0", 4).group_ids  # 4 - 3 held: one left
    for r in group_records(g0, [1.0, 0.0], actor_id="a1")[:4]:  # e0 whole (2 steps + end)
        buf.ingest(r)  # ... and e1's first step
    buf.ingest(step(f"{g1}-e0", g1, 0, actor_id="a1"))  # g1: one open episode, one not begun
    assert buf.stats().actor_credits == {"a1": 3, "a0": 1}
    assert buf.grant("a0", 1).groups == 0  # the budget is spent

    assert buf.reclaim("a1") == (3, 2)  # 3 credits; g0-e1 and g1-e0 were open
    drops = buf.stats().drops
    assert (drops["reclaimed_credit"], drops["reclaimed_episode"]) == (3, 2)
    # g0 closes as after group_wait_s: its 1 whole episode >= min_group_episodes 1, ready;
    # g1 has none: too small; g2 never began.
    assert drops["group_too_small"] == 1
    assert [(e.group.group_id, len(e.group.episodes)) for e in buf.store.entries()] == [(g0, 1)]
    assert buf.admission.accepted == 1 and buf.admission.in_flight == 1  # a0's g3 only
    # 4 - 1 accepted - 1 in flight = 2 credits for the healthy actor, now rather than later.
    assert buf.grant("a0", 4).groups == 2
    assert buf.stats().actor_credits == {"a0": 3} and g3 in buf.admission.held_by("a0")
    # What the old process still had on the wire is late, never "ungranted".
    buf.ingest(step(f"{g1}-e0", g1, 1, actor_id="a1"))
    buf.ingest(step(f"{g2}-e0", g2, 0, actor_id="a1"))
    assert buf.stats().drops["late_record"] == 2 and buf.drops["invalid_record"] == 0
    assert buf.reclaim("a1") == (0, 0) and buf.stats().drops["reclaimed_credit"] == 3


def _report(actor_id: str, progress_age_s: float) -> ActorStats:
    return msgspec.structs.replace(_stats(actor_id, 1.0), progress_age_s=progress_age_s)


def test_actor_silence_counts_only_the_buffers_listening_time() -> None:
    """A buffer frozen for 90 s (SIGSTOP in a drill) must not make its actors look silent
    when it comes back, nor may a report it ingests late move their last progress back."""
    import pytest

    buf = _buffer()
    clock = buf._clock
    assert isinstance(clock, FakeClock)
    buf.tick()
    buf.ingest(_report("a1", 0.0))
    for _ in range(50):  # 10 s of ticks every 0.2 s, as the service ticks
        clock.advance(0.2)
        buf.tick()
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(10.0)}
    clock.advance(90.0)  # the loop stalled: the gap counts 1 s (MAX_TICK_GAP_S), not 90
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(10.0)}  # nor before the tick
    buf.tick()
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(11.0)}
    buf.ingest(_report("a1", 95.0))  # sent while it waited on the stalled buffer
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(11.0)}
    buf.ingest(_report("a1", 0.5))  # progress again
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(0.5)}
    buf.grant("a2", 1)  # credits before any report: judged from the grant
    clock.advance(0.2)
    buf.tick()
    assert buf.stats().actor_silence_s == {"a1": pytest.approx(0.7), "a2": pytest.approx(0.2)}
    restored = _buffer()  # a restarted buffer: the credit's actor is judged from the restore
    restored.restore(buf.state())
    assert restored.stats().actor_silence_s == {"a2": 0.0}
    restored.orphan_all()  # a relaunch: those actors are gone
    assert restored.stats().actor_silence_s == {}


def test_a_restarted_buffer_releases_the_restored_credits_their_actor_no_longer_runs() -> None:
    """A buffer restarted from a snapshot held 4 credits no live episode held and refused
    every record of groups granted after its snapshot: the run stalled for minutes. The
    actor's list of the groups it runs reconciles both. Budget by hand: (max_staleness 3 +
    version 0 + 1) x batch_groups 1 = 4 credits."""
    from agent_r1_async.buffers.reclaim import CLAIM_GRACE_S

    buf = _buffer(max_staleness=3, min_group_episodes=1)
    g0, g1, g2 = buf.grant("a0", 3).group_ids
    buf.ingest(step(f"{g0}-e0", g0, 0))  # g0 started before the snapshot
    restored = _buffer(max_staleness=3, min_group_episodes=1)
    restored.restore(buf.state())
    clock = restored._clock
    assert isinstance(clock, FakeClock)
    assert restored.admission.in_flight == 3 and restored.grant("a0", 4).groups == 1
    (g3,) = restored.admission.held_by("a0")[3:]  # the one granted after the restore
    # Within the grace: g1 claimed, "lost-9" (granted by the dead buffer after its snapshot)
    # named unknown, nothing released yet (the actor's queued records may still arrive).
    clock.advance(1.0)
    grant = restored.grant("a0", 0, held=[g1, g3, "lost-9"])
    assert grant.unknown == ["lost-9"] and restored.admission.in_flight == 4
    # After the grace, g0 and g2 (restored, never claimed) are released: g0's open episode
    # is dropped and its group, with no whole episode, too small.
    clock.advance(CLAIM_GRACE_S)
    grant = restored.grant("a0", 4, held=[g1, g3])
    assert grant.unknown == [] and restored.drops["unclaimed_credit"] == 2
    assert restored.stats().drops["group_too_small"] == 1
    assert grant.groups == 2  # 4 - (g1, g3) in flight
    assert set(restored.admission.held_by("a0")) == {g1, g3, *grant.group_ids}
    assert not restored.admission.holds(g0) and not restored.admission.holds(g2)
    # g1 is claimed for good: later requests that still list it keep it.
    clock.advance(100.0)
    restored.tick()
    assert g1 in restored.admission.held_by("a0") and restored.drops["unclaimed_credit"] == 2


def test_restored_credits_no_actor_claims_are_released_within_the_bound() -> None:
    from agent_r1_async.buffers.reclaim import CLAIM_WITHIN_S

    buf = _buffer(max_staleness=3)
    buf.grant("a0", 2)
    buf.grant("a1", 1)
    restored = _buffer(max_staleness=3)
    restored.restore(buf.state())
    clock = restored._clock
    assert isinstance(clock, FakeClock)
    clock.advance(CLAIM_WITHIN_S - 1.0)
    restored.tick()
    assert restored.admission.in_flight == 3
    clock.advance(2.0)
    restored.tick()
    assert restored.admission.in_flight == 0 and restored.drops["unclaimed_credit"] == 3
    assert restored.grant("a0", 4).groups == 4


def test_a_running_buffer_names_the_groups_it_holds_no_credit_for() -> None:
    """Without a restart nothing is released: a listed group is unknown when it was never
    granted to this actor here (another actor's, or none) or was already closed."""
    buf = _buffer(max_staleness=3, min_group_episodes=2)
    g0, g1 = buf.grant("a0", 2).group_ids
    (g2,) = buf.grant("a1", 1).group_ids
    for r in group_records(g0, [0.0, 1.0]):
        buf.ingest(r)  # g0 complete: its credit is spent
    grant = buf.grant("a0", 0, held=[g0, g1, g2, "x"])
    assert grant.unknown == [g0, g2, "x"] and grant.groups == 0
    assert set(buf.admission.held_by("a0")) == {g1} and buf.drops["unclaimed_credit"] == 0
    assert buf.grant("a0", 0, held=["g"] * 10_001).unknown == []
    assert buf.drops["invalid_request/held"] == 1


def test_failed_episodes_are_kept_for_samples_and_handed_out_once() -> None:
    """A failed episode is dropped from its group but kept whole in a bounded ring (the
    newest `MAX_FAILED_SAMPLE`); a batch asked for with `failed` carries up to that many,
    newest first, and they leave the buffer. An aborted one is not kept."""
    from agent_r1_async.config import MAX_FAILED_SAMPLE
    from tests.fakes.records import episode_records

    buf = _buffer(max_staleness=20)  # credits for every group at once
    n = MAX_FAILED_SAMPLE + 2
    gids = buf.grant("a0", n + 1).group_ids
    assert len(gids) == n + 1
    for i, gid in enumerate(gids[:n]):
        status = "aborted" if i == n - 1 else "env_error"
        for rec in episode_records(f"{gid}-bad", gid, status=status):
            buf.ingest(rec)
    for rec in group_records(gids[n], [1.0, 0.0]):
        buf.ingest(rec)
    assert buf.assembler.drops["failed_episode"] == n
    assert len(buf.assembler.failed) == MAX_FAILED_SAMPLE  # bounded; the aborted one skipped
    batch, why = buf.try_sample(1, 0, failed=2)
    assert batch is not None, why
    assert [e.end.episode_id for e in batch.failed] == [f"{gids[n - 2]}-bad", f"{gids[n - 3]}-bad"]
    assert [len(e.steps) for e in batch.failed] == [2, 2]
    assert len(buf.assembler.failed) == MAX_FAILED_SAMPLE - 2
    assert buf.take_failed(0) == [] and buf.take_failed(-1) == []

"""Assembly: steps -> episodes -> groups, with every dropped record counted by reason."""

from agent_r1_async.buffers.assembly import Assembler
from tests.fakes.clock import FakeClock
from tests.fakes.records import end, episode_records, step


def _asm(group_wait_s: float = 120.0, min_eps: int = 2, timeout: float = 600.0, grace: float = 5.0):
    return Assembler(group_wait_s, min_eps, timeout, grace), FakeClock()


def _feed(asm: Assembler, clock: FakeClock, records) -> None:
    for r in records:
        asm.add(r, clock())


def test_complete_group_with_out_of_order_and_duplicate_steps() -> None:
    asm, clock = _asm()
    # Episode e0: steps arrive 1, 0, 1 (duplicate), then the end.
    opened = asm.add(step("e0", "g", 1), clock())
    assert opened  # the first record of group g opens it
    _feed(asm, clock, [step("e0", "g", 0), step("e0", "g", 1), end("e0", "g", 2, reward=1.0)])
    assert asm.drain() == ([], [])  # 1 of 2 episodes ended: not ready
    _feed(asm, clock, episode_records("e1", "g", num_steps=1, reward=0.0))
    ready, dropped = asm.drain()
    assert dropped == [] and len(ready) == 1
    group = ready[0].group
    assert group.group_id == "g" and group.task_id == "task-g"
    assert [e.end.episode_id for e in group.episodes] == ["e0", "e1"]
    assert [s.step_index for s in group.episodes[0].steps] == [0, 1]
    assert asm.drops == {"duplicate_step": 1}
    assert asm.groups_assembling == 0 and ready[0].nbytes > 0


def test_failed_episodes_leave_the_group_and_are_counted() -> None:
    asm, clock = _asm(min_eps=2)
    _feed(asm, clock, episode_records("e0", "g", group_size=3))
    _feed(asm, clock, episode_records("e1", "g", group_size=3, status="env_error"))
    _feed(asm, clock, episode_records("e2", "g", group_size=3, status="truncated"))
    ready, _ = asm.drain()
    assert [e.end.episode_id for e in ready[0].group.episodes] == ["e0", "e2"]
    assert asm.drops == {"failed_episode": 1}


def test_group_with_too_few_trainable_episodes_is_dropped() -> None:
    asm, clock = _asm(min_eps=2)
    _feed(asm, clock, episode_records("e0", "g", group_size=2))
    _feed(asm, clock, episode_records("e1", "g", group_size=2, status="aborted"))
    assert asm.drain() == ([], ["g"])
    assert asm.drops == {"failed_episode": 1, "group_too_small": 1}


def test_group_becomes_ready_after_group_wait_with_enough_episodes() -> None:
    asm, clock = _asm(group_wait_s=120.0, min_eps=2)
    _feed(asm, clock, episode_records("e0", "g", group_size=4))
    _feed(asm, clock, episode_records("e1", "g", group_size=4))
    asm.add(step("e2", "g", 0), clock())  # a straggler, still running
    clock.advance(119.0)
    asm.poll(clock())
    assert asm.drain() == ([], [])
    clock.advance(1.0)  # 120 s after the group's first record
    asm.poll(clock())
    ready, _ = asm.drain()
    assert [e.end.episode_id for e in ready[0].group.episodes] == ["e0", "e1"]
    asm.add(step("e2", "g", 1), clock())  # the straggler's later records are counted, not kept
    assert asm.drops == {"abandoned_episode": 1, "late_record": 1}


def test_dead_actor_episode_expires_and_is_never_half_trained() -> None:
    asm, clock = _asm(group_wait_s=1e9, timeout=600.0, min_eps=2)
    _feed(asm, clock, episode_records("e0", "g", group_size=3))
    _feed(asm, clock, episode_records("e1", "g", group_size=3))
    _feed(asm, clock, [step("e2", "g", 0), step("e2", "g", 1)])  # then its actor dies
    clock.advance(599.0)
    asm.poll(clock())
    assert asm.drain() == ([], [])
    clock.advance(1.0)
    asm.poll(clock())
    ready, _ = asm.drain()
    assert [e.end.episode_id for e in ready[0].group.episodes] == ["e0", "e1"]
    assert asm.drops == {"expired_episode": 1}


def test_group_whose_only_episode_expires_is_dropped() -> None:
    asm, clock = _asm(timeout=10.0)
    asm.add(step("e0", "g", 0), clock())
    clock.advance(10.0)
    asm.poll(clock())
    assert asm.drain() == ([], ["g"])
    assert asm.drops == {"expired_episode": 1, "group_too_small": 1}


def test_episode_end_disagreeing_with_received_steps() -> None:
    asm, clock = _asm(grace=5.0, min_eps=1)
    # More steps received than the end announces: dropped at once.
    _feed(asm, clock, [step("e0", "g0", 0), step("e0", "g0", 1), end("e0", "g0", 1, group_size=1)])
    assert asm.drain() == ([], ["g0"])
    # Fewer: it waits step_grace_s for the missing one, which arrives in time.
    _feed(asm, clock, [step("e1", "g1", 0), end("e1", "g1", 2, group_size=1)])
    clock.advance(4.0)
    asm.poll(clock())
    asm.add(step("e1", "g1", 1), clock())
    ready, _ = asm.drain()
    assert [len(e.steps) for e in ready[0].group.episodes] == [2]
    # Fewer, and the missing step never comes: dropped after the grace period.
    _feed(asm, clock, [step("e2", "g2", 0), end("e2", "g2", 3, group_size=1)])
    clock.advance(5.0)
    asm.poll(clock())
    assert asm.drain() == ([], ["g2"])
    assert asm.drops == {"step_mismatch": 2, "group_too_small": 2}


def test_export_and_restore_keep_partial_groups() -> None:
    asm, clock = _asm()
    _feed(asm, clock, episode_records("e0", "g", group_size=2))
    asm.add(step("e1", "g", 0), clock())
    exported = asm.export()
    fresh, clock2 = _asm()
    fresh.restore(exported, clock2())
    assert fresh.nbytes == asm.nbytes
    _feed(fresh, clock2, [step("e1", "g", 1), end("e1", "g", 2)])
    ready, _ = fresh.drain()
    assert [e.end.episode_id for e in ready[0].group.episodes] == ["e0", "e1"]


def test_approx_nbytes_counts_packed_arrays_at_their_item_size() -> None:
    import msgspec

    from agent_r1_async.buffers.assembly import approx_nbytes
    from agent_r1_async.wire import messages as m

    rec = step("e", "g", 0)
    packed = msgspec.structs.replace(
        rec, context_ids=m.TokenIds(range(100)), action_ids=m.TokenIds(range(10)),
        behavior_logprobs=m.LogProbs([-0.5] * 10), token_versions=[])
    # 400 record + (80 + 4·100) + (80 + 4·10) + 0 (empty token_versions list) + (80 + 8·10)
    assert approx_nbytes(packed) == 400 + 480 + 120 + 0 + 160
    lists = msgspec.structs.replace(packed, context_ids=list(range(100)),
                                    action_ids=list(range(10)), behavior_logprobs=[-0.5] * 10)
    assert approx_nbytes(lists) == 400 + 40 * 110 + 32 * 10


def test_the_bytes_assembling_are_the_open_groups_bytes_through_every_change() -> None:
    """`nbytes` is a running total (every credit grant reads it): it must equal the records
    the open groups hold after adds, a dropped episode, a completed group, a reclaim, an
    expiry and a restore, and be 0 once nothing assembles."""
    from agent_r1_async.buffers.assembly import approx_nbytes

    asm, clock = _asm(min_eps=2, timeout=600.0)
    s0, s1, e0 = step("a0", "ga", 0), step("a0", "ga", 1), end("a0", "ga", 2, group_size=3)
    _feed(asm, clock, [s0, s1, e0])
    per_episode = approx_nbytes(s0) + approx_nbytes(s1) + approx_nbytes(e0)
    assert asm.nbytes == per_episode
    _feed(asm, clock, episode_records("a1", "ga", group_size=3, status="env_error"))
    assert asm.nbytes == per_episode  # the failed episode's bytes left with it
    _feed(asm, clock, episode_records("b0", "gb", group_size=2))
    assert asm.nbytes == 2 * per_episode
    _feed(asm, clock, episode_records("b1", "gb", group_size=2))
    assert asm.nbytes == per_episode  # gb completed: ready, no longer assembling
    asm.add(step("c0", "gc", 0), clock())
    assert asm.nbytes == per_episode + approx_nbytes(s0)
    assert asm.reclaim("gc", clock()) == 1 and asm.nbytes == per_episode
    fresh, clock2 = _asm()
    fresh.restore(asm.export(), clock2())
    assert fresh.nbytes == per_episode
    clock.advance(600.0)
    asm.poll(clock())  # ga's last episode never comes: the group expires
    assert asm.nbytes == 0 and asm.groups_assembling == 0

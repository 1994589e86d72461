"""Episode lengths at the buffer: generated vs trained vs dropped by length bucket, and what a
reclaim or a restart discards. Every expected number is derived by hand in the comments; each
fake step carries 3 action tokens (tests/fakes/records.py)."""

from __future__ import annotations

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.lengths import Loss, length_bucket, length_metrics
from agent_r1_async.buffers.unsaved import UnsavedEpisodes
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.envs.world.env import horizon_bucket
from agent_r1_async.run.output.metric_names import merge_metrics
from tests.fakes.clock import FakeClock
from tests.fakes.records import end, episode_records, step


def _buffer(group_size: int = 3, max_steps: int = 64, **kw: object) -> EpisodeBuffer:
    cfg = BufferConfig(**{"spi_tolerance": 100.0, **kw})  # type: ignore[arg-type]
    return EpisodeBuffer(cfg, AlgorithmConfig(group_size=group_size, batch_groups=1),
                         FakeClock(), bounds=RecordBounds(max_group_size=group_size,
                                                          max_steps=max_steps))


def _ingest(buf: EpisodeBuffer, records) -> None:
    for r in records:
        buf.ingest(r)


def _buckets(m: dict[str, float], series: str) -> dict[int, float]:
    return {int(k.rsplit("_", 1)[1]): v for k, v in m.items()
            if k.startswith(f"episodes/{series}/le_")}


def test_the_bucket_is_the_worlds_horizon_bucket_capped_at_max_turns() -> None:
    assert all(length_bucket(n) == horizon_bucket(n) for n in range(0, 130))
    assert [length_bucket(n, max_steps=40) for n in (1, 3, 9, 33, 40, 64)] == [1, 4, 16, 64,
                                                                                64, 64]


def test_generated_trained_and_dropped_steps_by_length_bucket_by_hand() -> None:
    """Group g1: episodes of 3, 9 and 40 steps, the 40-step one failed (env_error): the group
    is ready with 3 and 9. Group g2: 5 and 6 steps of policy version 0, complete only once the
    learner is at version 10 (max_staleness 3): stale, never trained."""
    buf = _buffer(max_staleness=3, min_group_episodes=2, max_reuse=2)
    g1, g2 = buf.grant("a0", 2).group_ids
    _ingest(buf, episode_records(f"{g1}-a", g1, num_steps=3, group_size=3))
    _ingest(buf, episode_records(f"{g1}-b", g1, num_steps=9, group_size=3))
    _ingest(buf, episode_records(f"{g1}-c", g1, num_steps=40, group_size=3, status="env_error"))
    assert len(buf.store) == 1
    batch, _ = buf.try_sample(1, 0)
    assert batch is not None and [len(e.steps) for e in batch.groups[0].episodes] == [3, 9]
    again, _ = buf.try_sample(1, 0)  # its second use (max_reuse 2): trained once, not twice
    assert again is not None and again.groups[0].group_id == g1
    buf.set_version(10)
    _ingest(buf, episode_records(f"{g2}-a", g2, num_steps=5, group_size=2))
    _ingest(buf, episode_records(f"{g2}-b", g2, num_steps=6, group_size=2))
    assert buf.stats().drops["stale"] == 1 and len(buf.store) == 0

    assert buf.assembler.lengths.export() == {
        # ended: 3 -> le_4, 5 and 6 -> le_8, 9 -> le_16, 40 -> le_64 (the failed one too)
        "generated/le_4": 1, "generated_steps/le_4": 3,
        "generated/le_8": 2, "generated_steps/le_8": 11,
        "generated/le_16": 1, "generated_steps/le_16": 9,
        "generated/le_64": 1, "generated_steps/le_64": 40,
        # g1 at its first sample: 3 and 9
        "trained/le_4": 1, "trained_steps/le_4": 3,
        "trained/le_16": 1, "trained_steps/le_16": 9,
        # the failed episode: 40 steps x 3 tokens; g2's two: 11 steps x 3 tokens
        "dropped/failed_episode/le_64": 1, "dropped_steps/failed_episode/le_64": 40,
        "dropped_tokens/failed_episode": 120,
        "dropped/stale/le_8": 2, "dropped_steps/stale/le_8": 11, "dropped_tokens/stale": 33,
    }
    m, _ = merge_metrics({"metrics": {"version": 10}}, {"drops": buf.stats().drops})
    # Every bucket up to that of max_turns 64 is logged, 0 or not: le_1 ... le_64.
    assert _buckets(m, "generated") == {1: 0, 2: 0, 4: 1, 8: 2, 16: 1, 32: 0, 64: 1}
    assert _buckets(m, "generated_steps") == {1: 0, 2: 0, 4: 3, 8: 11, 16: 9, 32: 0, 64: 40}
    assert _buckets(m, "trained") == {1: 0, 2: 0, 4: 1, 8: 0, 16: 1, 32: 0, 64: 0}
    assert _buckets(m, "trained_steps") == {1: 0, 2: 0, 4: 3, 8: 0, 16: 9, 32: 0, 64: 0}
    assert _buckets(m, "dropped") == {1: 0, 2: 0, 4: 0, 8: 2, 16: 0, 32: 0, 64: 1}
    assert _buckets(m, "dropped_steps") == {1: 0, 2: 0, 4: 0, 8: 11, 16: 0, 32: 0, 64: 40}
    assert {k: v for k, v in m.items() if k.startswith("buffer/drops_")} == {
        "buffer/drops_by_len/failed_episode/le_64": 1, "buffer/drops_by_len/stale/le_8": 2,
        "buffer/drops_steps/failed_episode": 40, "buffer/drops_steps/stale": 11,
        "buffer/drops_tokens/failed_episode": 120, "buffer/drops_tokens/stale": 33}
    # Means: generated (3 + 5 + 6 + 9 + 40) / 5 = 12.6, trained (3 + 9) / 2 = 6.0.
    assert m["episodes/generated_steps_mean"] == 12.6
    assert m["episodes/trained_steps_mean"] == 6.0
    assert m["episodes/trained_length_ratio"] == 6.0 / 12.6
    # Nothing untrained is held: g1 was trained, the rest dropped.
    assert (m["buffer/unsaved_episodes"], m["buffer/unsaved_tokens"]) == (0, 0)
    # The ledger's counts are not drops: nothing of them under buffer/drops/.
    assert not any(k.startswith("buffer/drops/length") for k in m)
    assert {k for k in m if k.startswith("buffer/drops/")} == {
        "buffer/drops/failed_episode", "buffer/drops/stale", "buffer/drops/reuse_exhausted"}


def test_stragglers_abandoned_after_group_wait_are_dropped_at_their_length() -> None:
    """Group of 3 after group_wait_s 120 s: two 2-step episodes done, a 30-step straggler
    still running: it is abandoned at its 30 steps (le_32) and never generated."""
    clock = FakeClock()
    cfg = BufferConfig(spi_tolerance=100.0, group_wait_s=120.0, min_group_episodes=2)
    buf = EpisodeBuffer(cfg, AlgorithmConfig(group_size=3, batch_groups=1), clock)
    (g,) = buf.grant("a0", 1).group_ids
    _ingest(buf, episode_records(f"{g}-a", g, group_size=3))
    _ingest(buf, episode_records(f"{g}-b", g, group_size=3))
    _ingest(buf, [step(f"{g}-c", g, i) for i in range(30)])
    clock.advance(120.0)
    buf.tick()
    assert len(buf.store) == 1
    assert buf.assembler.drops["abandoned_episode"] == 1
    assert buf.assembler.lengths.export() == {
        "generated/le_2": 2, "generated_steps/le_2": 4,
        "dropped/abandoned_episode/le_32": 1, "dropped_steps/abandoned_episode/le_32": 30,
        "dropped_tokens/abandoned_episode": 90}


def test_a_reclaim_counts_the_episodes_and_tokens_it_discards_with_their_lengths() -> None:
    """Actor a1 holds g0 (e0 whole, 4 steps; e1 open at 7 steps) and g1 (e0 open at 20 steps),
    min_group_episodes 2. Reclaiming it drops the open e1 and g1-e0 (reclaimed_episode), and
    g0, with 1 episode done < 2, is too small: its whole e0 goes too. Discarded: 3 episodes,
    4 + 7 + 20 = 31 steps, 31 x 3 = 93 tokens; one each in le_4, le_8, le_32."""
    buf = _buffer(group_size=2, min_group_episodes=2)
    g0, g1 = buf.grant("a1", 2).group_ids
    _ingest(buf, episode_records(f"{g0}-e0", g0, num_steps=4, actor_id="a1"))
    _ingest(buf, [step(f"{g0}-e1", g0, i, actor_id="a1") for i in range(7)])
    _ingest(buf, [step(f"{g1}-e0", g1, i, actor_id="a1") for i in range(20)])
    credits, episodes, loss = buf.reclaim_report("a1")
    assert (credits, episodes) == (2, 2)
    assert loss.to_counts() == {"discarded": 3, "steps": 31, "tokens": 93,
                                "le_4": 1, "le_8": 1, "le_32": 1}
    assert loss.phrase() == "3 episodes (31 steps: 1 of <=4, 1 of <=8, 1 of <=32; 93 generated " \
                            "tokens)"
    assert Loss.from_counts({"credits": 2, "episodes": 2, **loss.to_counts()}) == loss
    assert buf.assembler.lengths.export() == {
        "generated/le_4": 1, "generated_steps/le_4": 4,
        "dropped/reclaimed_episode/le_8": 1, "dropped_steps/reclaimed_episode/le_8": 7,
        "dropped/reclaimed_episode/le_32": 1, "dropped_steps/reclaimed_episode/le_32": 20,
        "dropped_tokens/reclaimed_episode": 81,
        "dropped/group_too_small/le_4": 1, "dropped_steps/group_too_small/le_4": 4,
        "dropped_tokens/group_too_small": 12}
    assert buf.reclaim_report("a1")[2] == Loss()  # nothing left to discard
    assert Loss().phrase() == "no episode"


def test_the_stats_before_and_after_give_what_was_dropped_between() -> None:
    """What the supervisor measures around a learner restart: the drops that grew."""
    buf = _buffer(group_size=2, min_group_episodes=2)
    g0, g1 = buf.grant("a0", 2).group_ids
    _ingest(buf, episode_records(f"{g0}-e0", g0, num_steps=3))
    before = buf.stats().drops
    # The stopped loop's episode ends aborted at 5 steps (failed_episode), its group is then
    # too small (the 3-step one goes too); g1's open 10-step episode is reclaimed.
    _ingest(buf, [step(f"{g0}-e1", g0, i) for i in range(5)] + [end(f"{g0}-e1", g0, 5,
                                                                     status="aborted")])
    _ingest(buf, [step(f"{g1}-e0", g1, i) for i in range(10)])
    buf.reclaim("a0")
    loss = Loss.between(before, buf.stats().drops)
    assert loss.to_counts() == {"discarded": 3, "steps": 18, "tokens": 54,
                                "le_4": 1, "le_8": 1, "le_16": 1}
    assert Loss.between(buf.stats().drops, before) == Loss()  # counters that went down: 0


def test_unsaved_counts_the_untrained_episodes_with_a_record_since_the_snapshot() -> None:
    """A restart from the last snapshot loses every record received since, so each episode
    with one can never be whole: all its steps received are discarded."""
    buf = _buffer(group_size=2, min_group_episodes=2)
    g0, g1 = buf.grant("a0", 2).group_ids
    _ingest(buf, [step(f"{g0}-e0", g0, i) for i in range(3)])
    _ingest(buf, episode_records(f"{g1}-e0", g1, num_steps=2))
    assert buf.unsaved().to_counts() == {"discarded": 2, "steps": 5, "tokens": 15,
                                         "le_2": 1, "le_4": 1}
    buf.saved()
    assert buf.unsaved() == Loss()
    buf.ingest(step(f"{g0}-e0", g0, 3))  # g0-e0 again: all of its 4 steps
    _ingest(buf, episode_records(f"{g1}-e1", g1, num_steps=1))  # completes g1: stored
    assert buf.unsaved().to_counts() == {"discarded": 2, "steps": 5, "tokens": 15,
                                         "le_1": 1, "le_4": 1}
    assert buf.try_sample(1, 0)[0] is not None  # g1 trained: no longer at stake
    assert buf.unsaved().to_counts() == {"discarded": 1, "steps": 4, "tokens": 12, "le_4": 1}
    drops = buf.stats().drops
    assert {k: v for k, v in drops.items() if k.startswith("length/unsaved/")} == {
        "length/unsaved/discarded": 1, "length/unsaved/steps": 4, "length/unsaved/tokens": 12,
        "length/unsaved/le_4": 1}


def test_a_costly_unsaved_count_is_reused_for_a_bounded_time() -> None:
    """Past `reuse_from` episodes a count that cost more than `cheap_s` is reused for
    `reuse_factor` times its cost (stats requests stay cheap however many episodes); a
    snapshot ends the reuse, and below `reuse_from` every count is fresh."""
    buf = _buffer(group_size=2, min_group_episodes=2)
    clock = FakeClock()
    costly = UnsavedEpisodes(buf.assembler, buf.store, clock, reuse_from=0, cheap_s=0.0,
                             reuse_factor=1e6)  # any count reused for 1e6 × its cost
    fresh = UnsavedEpisodes(buf.assembler, buf.store, clock, reuse_from=2)
    (g0,) = buf.grant("a0", 1).group_ids
    for i in range(3):
        buf.ingest(step(f"{g0}-e0", g0, i))
    for u in (costly, fresh):
        u.add(f"{g0}-e0", g0)
    assert costly.loss().to_counts() == fresh.loss().to_counts() == {
        "discarded": 1, "steps": 3, "tokens": 9, "le_4": 1}
    buf.ingest(step(f"{g0}-e0", g0, 3))
    assert costly.loss().to_counts()["steps"] == 3  # reused: the clock has not moved
    assert fresh.loss().to_counts()["steps"] == 4  # 1 episode < reuse_from 2: counted
    clock.advance(1e9)  # past 1e6 × the count's cost (under 1,000 s whatever the load)
    assert costly.loss().to_counts()["steps"] == 4
    costly.saved()
    assert costly.loss() == Loss()  # a snapshot: nothing unsaved, not the reused count


def test_the_ledger_survives_a_snapshot_and_merges_without_one() -> None:
    buf = _buffer(group_size=2, min_group_episodes=1)
    (g,) = buf.grant("a0", 1).group_ids
    _ingest(buf, episode_records(f"{g}-e0", g, num_steps=3, group_size=1))
    fresh = _buffer(group_size=2, min_group_episodes=1)
    fresh.restore(buf.state())
    assert fresh.assembler.lengths.export() == buf.assembler.lengths.export() == {
        "generated/le_4": 1, "generated_steps/le_4": 3}
    # A buffer that sends no length counts (an older one) logs none, and no mean.
    assert length_metrics({"stale": 2}) == {}
    # Without env.max_turns the buckets go up to the largest seen.
    unbounded = _buffer(group_size=2, min_group_episodes=1, max_steps=0)
    (g,) = unbounded.grant("a0", 1).group_ids
    _ingest(unbounded, episode_records(f"{g}-e0", g, num_steps=5, group_size=1))
    m = length_metrics(unbounded.stats().drops)
    assert _buckets(m, "generated") == {1: 0, 2: 0, 4: 0, 8: 1}
    assert "episodes/trained_steps_mean" not in m and "episodes/trained_length_ratio" not in m

"""Group store and buffer core: priorities, IS weights, FIFO, reuse, stale drop, memory bound."""

import math
from collections import Counter

import msgspec
import pytest

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.store import GroupStore, describe
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.messages import Episode, Group
from tests.fakes.clock import FakeClock
from tests.fakes.records import end, group_records, make_group, step


def _store(mode: str = "prioritized", alpha: float = 1.0, beta: float = 0.5, **kw) -> GroupStore:
    args = dict(freshness_decay=0.5, priority_eps=1.0, max_staleness=4, max_reuse=100, seed=0)
    args.update(kw)
    return GroupStore(mode, alpha, beta, **args)


def test_importance_weights_hand_derived() -> None:
    # α = 1, β = 0.5, priority_eps = 1, freshness_decay = 0.5, learner at version 1.
    #   g0: returns [0, 0]  std 0, version 1: p = (0 + 1) × 0.5^0 = 1
    #   g1: returns [0, 2]  std 1, version 1: p = (1 + 1) × 0.5^0 = 2
    #   g2: returns [0, 14] std 7, version 0: p = (7 + 1) × 0.5^1 = 4
    # P = [1, 2, 4] / 7, N = 3: N·P = [3/7, 6/7, 12/7]; w = (N·P)^-0.5 = √(7/3), √(7/6), √(7/12);
    # divided by the largest, √(7/3): w = [1, √(1/2), √(1/4)] = [1, 0.70711, 0.5].
    store = _store()
    store.set_version(1)
    for gid, rewards, version in [("g0", [0, 0], 1), ("g1", [0, 2], 1), ("g2", [0, 14], 0)]:
        assert store.insert(describe(make_group(gid, rewards, version=version), nbytes=10))
    picked, weights, evicted = store.sample(3)
    by_id = {e.group.group_id: w for e, w in zip(picked, weights, strict=True)}
    assert by_id["g0"] == pytest.approx(1.0, abs=1e-12)
    assert by_id["g1"] == pytest.approx(math.sqrt(0.5), abs=1e-12)
    assert by_id["g2"] == pytest.approx(0.5, abs=1e-12)
    assert evicted == []
    # A version bump scales every priority by the same factor (and a far one re-bases the
    # tree): the probabilities, hence the weights, do not change.
    store.set_version(100)
    picked, weights, _ = store.sample(3)
    by_id = {e.group.group_id: w for e, w in zip(picked, weights, strict=True)}
    assert by_id["g1"] == pytest.approx(math.sqrt(0.5), abs=1e-12)


def test_priority_with_alpha_and_freshness() -> None:
    store = _store(alpha=0.5)
    store.set_version(2)  # within the re-base window: priorities are relative to version 0
    entry = describe(make_group("g", [1, 3], version=0), 0)  # std 1 -> (1 + 1) × 0.5^0
    assert store.priority(entry) == pytest.approx(math.sqrt(2.0))
    entry = describe(make_group("h", [1, 3], version=2), 0)  # (1 + 1) × 0.5^-2 = 8
    assert store.priority(entry) == pytest.approx(math.sqrt(8.0))


def test_equal_reward_groups_are_rare_but_not_never_drawn() -> None:
    # eps 0.01: g_flat p = 0.01, g_informative p = 1 + 0.01 -> P(flat) = 0.01 / 1.02 = 0.98 %.
    # 10,000 single draws: expected 98, binomial sd ≈ 9.9; the bounds are ±5 sd.
    store = _store(priority_eps=0.01, max_reuse=10**9)
    store.insert(describe(make_group("flat", [1, 1]), 0))
    store.insert(describe(make_group("informative", [0, 2]), 0))
    counts = Counter(store.sample(1)[0][0].group.group_id for _ in range(10_000))
    assert 48 < counts["flat"] < 148


def test_fifo_mode_oldest_first_and_reused_groups_go_to_the_back() -> None:
    store = _store(mode="fifo", max_reuse=2)
    for gid in ["a", "b", "c"]:
        store.insert(describe(make_group(gid, [0, 1]), 0))
    picked, weights, evicted = store.sample(2)
    assert [e.group.group_id for e in picked] == ["a", "b"] and weights == [1.0, 1.0]
    assert evicted == []
    picked, _, evicted = store.sample(2)
    assert [e.group.group_id for e in picked] == ["c", "a"]
    assert [e.group.group_id for e in evicted] == ["a"]  # second use: max_reuse reached
    assert [e.group.group_id for e in store.entries()] == ["b", "c"]


def _buffer(**kw) -> tuple[EpisodeBuffer, FakeClock]:
    clock = FakeClock()
    cfg = BufferConfig(**{"spi_tolerance": 100.0, **kw})
    return EpisodeBuffer(cfg, AlgorithmConfig(group_size=2, batch_groups=1), clock), clock


def _mixed_and_fresh(buf: EpisodeBuffer) -> tuple[str, str]:
    """Group "mixed": episode 0 spans versions (step 0 at v0, step 1 at v2), so its oldest
    action token is version 0 and its newest version 2. Group "fresh": step 0 at v1 with one
    action token generated at v2 (oldest 1, newest 2)."""
    buf.set_version(1)  # records carry versions up to the learner's + 1 (more are refused)
    mixed, fresh = buf.grant("a0", 2).group_ids
    recs = [step("m0", mixed, 0, version=0), step("m0", mixed, 1, version=2)]
    recs += [end("m0", mixed, 2, reward=0.0)]
    recs += [step("m1", mixed, 0, version=2), end("m1", mixed, 1, reward=1.0)]
    recs += [step("f0", fresh, 0, version=1, token_versions=[1, 1, 2])]
    recs += [end("f0", fresh, 1, reward=0.0)]
    recs += [step("f1", fresh, 0, version=2), end("f1", fresh, 1, reward=1.0)]
    for r in recs:
        buf.ingest(r)
    assert len(buf.store) == 2
    return mixed, fresh


def test_the_oldest_token_bound_drops_a_group_whose_episode_spans_updates() -> None:
    buf, _ = _buffer(max_staleness=1, max_reuse=1, staleness_from="oldest_token")
    _, fresh = _mixed_and_fresh(buf)
    # Learner at 2, max_staleness 1: oldest versions >= 1 are trainable; "mixed" has a v0 step.
    batch, why = buf.try_sample(2, learner_version=2)
    assert batch is None and "1 groups ready" in why
    assert buf.drops["stale"] == 1
    batch, _ = buf.try_sample(1, learner_version=2)
    assert batch is not None and [g.group_id for g in batch.groups] == [fresh]
    # Token-weighted histogram: f0 has 2 tokens at v1 (staleness 1) and 1 at v2; f1 3 at v2.
    assert buf.staleness_hist == {1: 2, 0: 4}


def test_the_newest_token_bound_trains_a_long_episode_and_drops_what_waited() -> None:
    """The default: both groups' newest tokens are version 2, so at learner 2 (max_staleness
    1) both train, "mixed"'s v0 step included (staleness 2 in the token histogram: 3 tokens).
    At learner 4 a group whose newest token is v2 has waited 2 > 1 versions: dropped."""
    buf, _ = _buffer(max_staleness=1, max_reuse=1)
    mixed, fresh = _mixed_and_fresh(buf)
    batch, _ = buf.try_sample(2, learner_version=2)
    assert batch is not None and {g.group_id for g in batch.groups} == {mixed, fresh}
    assert buf.drops["stale"] == 0
    # mixed: m0 step 0 (3 tokens, v0: 2), m0 step 1 and m1 (6 tokens at v2: 0);
    # fresh: 2 tokens at v1 (1), 1 + 3 at v2 (0).
    assert buf.staleness_hist == {2: 3, 1: 2, 0: 10}
    buf, _ = _buffer(max_staleness=1, max_reuse=1)
    _mixed_and_fresh(buf)  # the same groups, sampled only at learner 4
    batch, _ = buf.try_sample(1, learner_version=4)
    assert batch is None and buf.drops["stale"] == 2 and len(buf.store) == 0


def test_memory_bound_stops_credits_instead_of_dropping() -> None:
    buf, _ = _buffer(max_bytes=1 << 20, max_frame_bytes=1 << 20, max_reuse=1)

    # One step with a 10,000-token context: 400 + 40 × (10,000 + 3) + 32 × 3 = 400,616 B;
    # an end record 400 B. A group of 2 one-step episodes: 2 × 401,016 = 802,032 B < 1 MiB.
    def big_group(gid: str) -> None:
        for j in range(2):
            s = msgspec.structs.replace(step(f"{gid}{j}", gid, 0), context_ids=[7] * 10_000)
            buf.ingest(s)
            buf.ingest(end(f"{gid}{j}", gid, 1, reward=float(j)))

    big_group(buf.grant("a0", 1).group_ids[0])
    assert buf.nbytes == 802_032
    grant = buf.grant("a0", 1)
    assert grant.groups == 1
    big_group(grant.group_ids[0])  # 1,604,064 B >= 1 MiB: full; granted data is still kept
    assert len(buf.store) == 2
    grant = buf.grant("a0", 1)
    assert (grant.groups, grant.reason) == (0, "memory_full")
    batch, _ = buf.try_sample(1, learner_version=0)  # max_reuse 1: consumed and evicted
    assert batch is not None and buf.nbytes == 802_032
    assert buf.grant("a0", 1).groups == 1


def test_grant_reports_which_bound_limits() -> None:
    buf, _ = _buffer(max_staleness=0)  # (0 + 0 + 1) × 1 = 1 group
    grant = buf.grant("a0", 3)
    assert (grant.groups, grant.reason, len(grant.group_ids)) == (1, "staleness", 1)
    for r in group_records(grant.group_ids[0], [0.0, 1.0]):
        buf.ingest(r)
    assert buf.admission.accepted == 1 and buf.admission.in_flight == 0


def test_describe_rejects_an_empty_group() -> None:
    with pytest.raises(ValueError, match="no steps"):
        describe(Group("g", "t", "fake", [Episode([], end("e", "g", 0))]), 0)


def test_a_group_due_to_go_stale_is_sampled_before_fresher_ones() -> None:
    """max_staleness 1, learner at 3: g_due (version 2) is stale after this update, so a
    batch of 1 takes it, although its priority is 1 × 0.5^1 = 0.5 against (1 + 1) × 1 = 2
    for each fresh one (α 1, priority_eps 1). The next batch, at learner 4, draws from the
    fresh ones only (g_due is gone)."""
    store = _store(max_staleness=1, max_reuse=1)
    store.set_version(3)
    store.insert(describe(make_group("g_due", [0, 0], version=2), nbytes=10))
    for gid in ("f0", "f1"):
        store.insert(describe(make_group(gid, [0, 2], version=3), nbytes=10))
    picked, weights, _ = store.sample(1)
    assert [e.group.group_id for e in picked] == ["g_due"] and weights == [1.0]
    store.set_version(4)
    picked, _, _ = store.sample(2)
    assert {e.group.group_id for e in picked} == {"f0", "f1"}


def test_due_groups_beyond_the_batch_take_the_highest_priority_first() -> None:
    """Three groups due at once, a batch of 2: the two with the larger return spread."""
    store = _store(max_staleness=0, max_reuse=1)
    store.set_version(5)
    for gid, rewards in (("low", [0, 0]), ("mid", [0, 2]), ("high", [0, 6])):
        store.insert(describe(make_group(gid, rewards, version=5), nbytes=10))
    picked, _, _ = store.sample(2)
    assert [e.group.group_id for e in picked] == ["high", "mid"]

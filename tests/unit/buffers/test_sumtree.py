"""Sum-tree: prefix-sum search, slot reuse, growth, and sampling frequencies vs priorities."""

import random

import pytest

from agent_r1_async.buffers.sumtree import SumTree


def _tree(priorities: list[float], capacity: int = 4) -> SumTree:
    t = SumTree(capacity)
    for p in priorities:
        t.add(p)
    return t


def test_find_maps_prefix_sums_to_slots() -> None:
    # Priorities 1, 2, 3, 4: cumulative intervals [0,1) [1,3) [3,6) [6,10).
    t = _tree([1.0, 2.0, 3.0, 4.0])
    assert t.total == 10.0
    cases = {0.0: 0, 0.999: 0, 1.0: 1, 2.999: 1, 3.0: 2, 5.999: 2, 6.0: 3, 9.999: 3}
    for u, slot in cases.items():
        assert t.find(u) == slot, u


def test_update_remove_and_free_slot_reuse() -> None:
    t = _tree([1.0, 2.0, 3.0])
    t.update(0, 5.0)  # 5 + 2 + 3
    assert t.total == 10.0
    t.remove(1)  # 5 + 3
    assert t.total == 8.0 and len(t) == 2
    assert t.find(5.0) == 2  # slot 1 holds no mass: u=5 falls in slot 2's [5, 8)
    assert t.add(7.0) == 1  # the freed slot is reused
    assert t.total == 15.0 and len(t) == 3
    with pytest.raises(KeyError):
        t.remove(3)  # never used
    with pytest.raises(ValueError):
        t.add(0.0)
    with pytest.raises(ValueError):
        t.update(0, float("nan"))


def test_grows_by_doubling_and_keeps_sums() -> None:
    t = _tree([float(i + 1) for i in range(5)], capacity=2)
    assert t.capacity == 8
    assert t.total == 15.0  # 1+2+3+4+5
    assert t.find(14.5) == 4


def test_sums_do_not_drift_over_many_updates() -> None:
    rng = random.Random(0)
    t = _tree([1.0] * 1000, capacity=1000)
    leaves = [1.0] * 1000
    for _ in range(50_000):
        slot = rng.randrange(1000)
        leaves[slot] = rng.uniform(1e-6, 1e6)
        t.update(slot, leaves[slot])
    assert t.total == pytest.approx(sum(leaves), rel=1e-12)


def test_sample_without_replacement_is_distinct_and_restores_priorities() -> None:
    t = _tree([1.0, 1.0, 1.0, 100.0])
    rng = random.Random(0)
    for _ in range(200):
        slots = t.sample(3, rng)
        assert len(set(slots)) == 3
    assert t.total == 103.0  # zeroed leaves were restored
    assert sorted(t.sample(4, rng)) == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        t.sample(5, rng)


def test_removed_slots_are_never_drawn() -> None:
    t = _tree([1.0] * 8)
    for s in (1, 3, 5, 7):
        t.remove(s)
    drawn = set(t.sample(2000, random.Random(1), replace=True))
    assert drawn == {0, 2, 4, 6}


def test_sampling_frequencies_match_priorities_chi_square() -> None:
    # Priorities 1..8 (total 36): P(i) = (i+1)/36. 36,000 draws -> expected count 1000·(i+1).
    # Pearson chi-square with 7 degrees of freedom; its 0.999 quantile is 24.32. The seed is
    # fixed, so the test is deterministic; a biased tree (e.g. off-by-one intervals, which
    # would move ~1000 draws between neighbours) gives a statistic in the hundreds.
    t = _tree([float(i + 1) for i in range(8)])
    n = 36_000
    counts = [0] * 8
    for s in t.sample(n, random.Random(1234), replace=True):
        counts[s] += 1
    expected = [n * (i + 1) / 36 for i in range(8)]
    chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))
    assert chi2 < 24.32, (chi2, counts)


def test_excluded_slots_are_never_drawn_and_keep_their_priority() -> None:
    t = SumTree()
    slots = [t.add(p) for p in (100.0, 1.0, 1.0)]
    rng = random.Random(0)
    for _ in range(200):
        assert set(t.sample(2, rng, exclude=[slots[0]])) == {slots[1], slots[2]}
    assert t.get(slots[0]) == 100.0 and t.total == 102.0
    with pytest.raises(ValueError, match="cannot draw 3 of 2"):
        t.sample(3, rng, exclude=[slots[0]])
    assert t.total == 102.0

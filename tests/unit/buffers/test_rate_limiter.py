"""Samples-per-insert limiter: diff = spi × inserts − samples stays in [min_diff, max_diff]."""

import pytest

from agent_r1_async.buffers.rate_limiter import SampleToInsertRatio


def test_learner_cannot_outrun_actors_nor_actors_the_learner() -> None:
    # spi 1, min_size 1, tolerance 4, batch 4 -> error buffer 4: min_diff -3, max_diff 5.
    rl = SampleToInsertRatio(1.0, min_size=1, tolerance=4.0, batch_groups=4)
    assert (rl.min_diff, rl.max_diff) == (-3.0, 5.0)
    assert rl.insert_room(pending=0) == 5
    assert rl.insert_room(pending=2) == 3
    assert not rl.can_sample(4, size=0)
    for _ in range(4):
        rl.on_insert()
    assert rl.insert_room(pending=0) == 1  # diff 4: one more group may be admitted
    assert rl.can_sample(4, size=4)  # 4 - 4 = 0 >= -3
    rl.on_sample(4)
    assert rl.can_sample(3, size=4)  # 0 - 3 = -3 >= -3: reuse of a little is tolerated
    rl.on_sample(3)
    assert not rl.can_sample(1, size=4)  # -3 - 1 < -3: wait for new inserts
    assert rl.insert_room(pending=0) == 8  # (5 - (-3)) / 1


def test_two_samples_per_insert_in_steady_state() -> None:
    # spi 2, min_size 1, tolerance 0, batch 1 -> error buffer 1: min_diff 1, max_diff 3.
    rl = SampleToInsertRatio(2.0, min_size=1, tolerance=0.0, batch_groups=1)
    assert rl.insert_room(0) == 1  # floor((3 - 0) / 2)
    rl.on_insert()  # diff 2
    assert rl.insert_room(0) == 0  # (3 - 2) / 2 = 0.5
    assert rl.can_sample(1, 1)
    rl.on_sample(1)  # diff 1
    assert not rl.can_sample(1, 1)
    assert rl.insert_room(0) == 1
    rl.on_insert()  # diff 3
    rl.on_sample(1)
    rl.on_sample(1)  # diff 1: two samples for that insert
    assert (rl.inserts, rl.samples, rl.diff) == (2, 3, 1.0)


def test_removed_groups_forgive_their_missing_samples() -> None:
    rl = SampleToInsertRatio(2.0, min_size=1, tolerance=0.0, batch_groups=1)
    rl.on_insert()  # diff 2
    rl.on_sample(1)  # diff 1
    rl.on_remove(times_sampled=1)  # evicted (stale) after 1 of its 2 samples: diff 0
    assert rl.diff == 0.0
    rl.on_remove(times_sampled=5)  # sampled more than spi: nothing to forgive
    assert rl.diff == 0.0


def test_window_is_widened_to_one_batch_so_a_batch_can_be_drawn() -> None:
    # tolerance 0 with batches of 8 would give min_diff = max_diff = 1: a batch of 8 could never
    # be drawn. The error buffer is max(0, 8) = 8: min_diff -7, max_diff 9.
    rl = SampleToInsertRatio(1.0, min_size=1, tolerance=0.0, batch_groups=8)
    assert rl.insert_room(0) == 9
    for _ in range(8):
        rl.on_insert()
    assert rl.can_sample(8, size=8)


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="samples_per_insert"):
        SampleToInsertRatio(0.0, 1, 1.0)

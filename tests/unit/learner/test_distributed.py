"""learner/distributed.py without a process group, and the token-balanced split."""

from __future__ import annotations

import pytest
import torch

from agent_r1_async.learner import distributed


def test_balance_splits_by_tokens_not_rows():
    # Longest first to the least-loaded rank: 9→r0, 7→r1, 4→r1 (7 < 9), 3→r0 (9 < 11),
    # 1→r1 (11 < 12): 12 / 12 tokens in 2 / 3 rows, where 3 + 2 rows in order gives 20 / 4.
    assert distributed.balance([9, 7, 4, 3, 1], 2) == [[0, 3], [1, 2, 4]]
    # Ties go to the lower rank and to the lower index: the same split on every rank.
    assert distributed.balance([5, 5, 5, 5], 2) == [[0, 2], [1, 3]]
    assert distributed.balance([5, 5, 5, 5], 2) == distributed.balance([5, 5, 5, 5], 2)
    # More ranks than sequences: the extra ranks get none (they run filler micro-batches).
    assert distributed.balance([3], 3) == [[0], [], []]
    assert distributed.balance([4, 2], 1) == [[0, 1]]
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        distributed.balance([1], 0)


def test_without_a_process_group_everything_is_local():
    assert not distributed.active()
    assert (distributed.rank(), distributed.world_size()) == (0, 1)
    assert distributed.all_reduce([1, 2.5]) == [1.0, 2.5]
    assert distributed.all_reduce([3.0], op="max") == [3.0]
    box = {"a": 1}
    assert distributed.broadcast(box, dict[str, int]) is box
    distributed.barrier()


def test_resolve_backend():
    assert distributed.resolve_backend("auto", torch.device("cpu")) == "gloo"
    assert distributed.resolve_backend("auto", torch.device("cuda")) == "nccl"
    assert distributed.resolve_backend("gloo", torch.device("cuda")) == "gloo"

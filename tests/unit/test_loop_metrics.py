"""Learner.update reports the mean of its PPO epochs' optimizer metrics."""

from __future__ import annotations

import pytest

from agent_r1_async.learner.loop import epoch_mean


def test_epoch_mean_averages_and_keeps_the_max_weight():
    first = {"loss": 0.5, "grad_norm": 2.0, "clip_frac_low": 0.0, "is_weight_max": 1.5}
    clipped = {"loss": -0.1, "grad_norm": 0.0, "clip_frac_low": 1.0, "is_weight_max": 1.2}
    out = epoch_mean([first, clipped])
    assert out == pytest.approx({"loss": 0.2, "grad_norm": 1.0, "clip_frac_low": 0.5,
                                 "is_weight_max": 1.5})
    assert epoch_mean([first]) == first

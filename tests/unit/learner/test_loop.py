"""The learner loop (learner/loop.py): `Learner.stop_waiting` and the update's metrics.

`Learner.stop_waiting`: an update waiting for data ends at its next poll, so the launch's
final checkpoint (queued on the learner's one worker thread, run/processes/hosts.py) is not held up to
`learner.sample_timeout_s` by an update that no data will come for (every env failing).

`Learner.update` reports the mean of its PPO epochs' optimizer metrics (`epoch_mean`).
"""

from __future__ import annotations

import threading
import time

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.learner.loop import Learner, SamplingStopped, epoch_mean
from agent_r1_async.wire import messages


class _NeverReady:
    """A buffer with nothing ready: each poll waits its full timeout, as the real one does."""

    def __init__(self) -> None:
        self.polls: list[float] = []

    def sample(self, num_groups: int, learner_version: int, timeout_s: float):
        self.polls.append(timeout_s)
        time.sleep(timeout_s)
        return messages.SampleBatch(groups=[], is_weights=[], learner_version=learner_version,
                                    ready=False, reason="nothing ready")


def _learner(source: _NeverReady) -> Learner:
    learner = Learner.__new__(Learner)  # only the sampling loop, no model
    learner.cfg = config_from_dict({}, ["learner.sample_timeout_s=600", "learner.republish_s=0.2"])
    learner.source, learner.version, learner.samples_drawn = source, 3, 0
    learner._stop_waiting = threading.Event()
    learner._republish_if_idle = lambda: None
    return learner


def test_an_update_waiting_for_data_stops_at_the_next_poll():
    source = _NeverReady()
    learner = _learner(source)
    threading.Timer(0.5, learner.stop_waiting).start()
    t0 = time.monotonic()
    with pytest.raises(SamplingStopped, match="stopped by the launcher"):
        learner._sample()
    waited = time.monotonic() - t0
    # Stopped at 0.5 s; the poll in progress (0.2 s each, plus 0.05 s between) runs out first.
    assert 0.5 <= waited < 0.5 + 0.2 + 0.05 + 0.5, waited
    assert learner.samples_drawn == 0 and all(t == pytest.approx(0.2) for t in source.polls)


def test_without_stop_it_keeps_waiting():
    source = _NeverReady()
    learner = _learner(source)
    done = threading.Event()

    def run() -> None:
        with pytest.raises(SamplingStopped):
            learner._sample()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert not done.wait(1.0) and len(source.polls) >= 3  # still polling after 1 s
    learner.stop_waiting()
    assert done.wait(2.0)


def test_epoch_mean_averages_and_keeps_the_max_weight():
    first = {"loss": 0.5, "grad_norm": 2.0, "clip_frac_low": 0.0, "is_weight_max": 1.5}
    clipped = {"loss": -0.1, "grad_norm": 0.0, "clip_frac_low": 1.0, "is_weight_max": 1.2}
    out = epoch_mean([first, clipped])
    assert out == pytest.approx({"loss": 0.2, "grad_norm": 1.0, "clip_frac_low": 0.5,
                                 "is_weight_max": 1.5})
    assert epoch_mean([first]) == first

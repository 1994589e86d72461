"""The learner loop (learner/loop.py): `Learner.stop_waiting` and the update's metrics.

`Learner.stop_waiting`: an update waiting for data ends at its next poll, so the launch's
final checkpoint (queued on the learner's one worker thread, run/processes/learner_group.py)
is not held up to `learner.sample_timeout_s` by an update that no data will come for (every
env failing).

`Learner.update` reports the mean of its PPO epochs' optimizer metrics (`epoch_mean`), and
while it computes, its progress in forward passes (`compute_progress`).
"""

from __future__ import annotations

import threading
import time

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.learner.loop import Learner, SamplingStopped, epoch_mean
from agent_r1_async.wire import messages
from tests.unit.learner.test_shared_prefix import model_dir  # noqa: F401  (a fixture)


class _NeverReady:
    """A buffer with nothing ready: each poll waits its full timeout, as the real one does.
    `stop_on_poll`: during that poll (1-based), the launcher's `stop_waiting` arrives."""

    def __init__(self, stop_on_poll: int = 0) -> None:
        self.polls: list[float] = []
        self.stop_on_poll = stop_on_poll
        self.learner: Learner | None = None

    def sample(self, num_groups: int, learner_version: int, timeout_s: float,
               failed_episodes: int = 0):
        self.polls.append(timeout_s)
        if len(self.polls) == self.stop_on_poll:
            assert self.learner is not None
            self.learner.stop_waiting()
        time.sleep(timeout_s)
        return messages.SampleBatch(groups=[], is_weights=[], learner_version=learner_version,
                                    ready=False, reason="nothing ready")


def _learner(source: _NeverReady) -> Learner:
    learner = Learner.__new__(Learner)  # only the sampling loop, no model
    learner.cfg = config_from_dict({}, ["learner.sample_timeout_s=600", "learner.republish_s=0.2"])
    learner.source, learner.version, learner.samples_drawn = source, 3, 0
    learner._stop_waiting = threading.Event()
    learner._republish_if_idle = lambda: None
    source.learner = learner
    return learner


def test_an_update_waiting_for_data_stops_at_the_next_poll():
    source = _NeverReady(stop_on_poll=3)
    learner = _learner(source)
    with pytest.raises(SamplingStopped, match="stopped by the launcher"):
        learner._sample()
    # Asked during the third poll: it ends when that poll does (each waits republish_s, not
    # sample_timeout_s), with no further poll.
    assert len(source.polls) == 3 and all(t == pytest.approx(0.2) for t in source.polls)
    assert learner.samples_drawn == 0


def test_without_stop_it_keeps_waiting():
    source = _NeverReady()
    learner = _learner(source)
    done = threading.Event()

    def run() -> None:
        with pytest.raises(SamplingStopped):
            learner._sample()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60  # a guard against a hang, not a bound
    while len(source.polls) < 3:
        assert time.monotonic() < deadline and not done.is_set()
        time.sleep(0.01)
    assert not done.is_set()  # still polling after three polls
    learner.stop_waiting()
    stopped_at = len(source.polls)
    assert done.wait(60)
    assert len(source.polls) <= stopped_at + 1  # the poll in progress, at most one more


def test_epoch_mean_averages_and_keeps_the_max_weight():
    first = {"loss": 0.5, "grad_norm": 2.0, "clip_frac_low": 0.0, "is_weight_max": 1.5}
    clipped = {"loss": -0.1, "grad_norm": 0.0, "clip_frac_low": 1.0, "is_weight_max": 1.2}
    out = epoch_mean([first, clipped])
    assert out == pytest.approx({"loss": 0.2, "grad_norm": 1.0, "clip_frac_low": 0.5,
                                 "is_weight_max": 1.5})
    assert epoch_mean([first]) == first


def test_an_update_reports_its_compute_progress_in_forward_passes(model_dir):  # noqa: F811
    """`compute_progress` while an update computes (the launcher's stop extrapolates a first
    update from it): 2 PPO epochs over n micro-batches are a proximal pass (1 forward pass
    each) and two training passes (3 each), 7n in all; at the first epoch the proximal pass's
    n are done, at the second n + 3n; nothing is reported outside the compute."""
    from agent_r1_async.learner.trainer import FORWARD_WORK, TRAIN_WORK
    from tests.fakes.learner import FakeSource
    from tests.unit.learner.test_shared_prefix import VOCAB, _cfg, _trainer

    cfg = _cfg(model_dir, ppo_epochs=2)
    learner = Learner(cfg, FakeSource(vocab=VOCAB, group_size=2), None, None,
                      trainer=_trainer(cfg, model_dir))
    seen: list[tuple[int, dict[str, float]]] = []
    optimize = learner.trainer.optimize

    def watched(mbs, version=None, counts=None):  # type: ignore[no-untyped-def]
        seen.append((len(mbs), learner.compute_progress()))
        return optimize(mbs, version, counts)

    learner.trainer.optimize = watched  # type: ignore[method-assign]
    assert learner.compute_progress() == {}
    learner.update()
    assert learner.compute_progress() == {}
    n = seen[0][0]
    assert (FORWARD_WORK, TRAIN_WORK) == (1, 3) and n >= 1
    assert [(p["work_done"], p["work_total"]) for _, p in seen] == [(n, 7 * n), (4 * n, 7 * n)]
    assert 0.0 <= seen[0][1]["computing_s"] <= seen[1][1]["computing_s"]
    assert learner.trainer.work_done == 7 * n

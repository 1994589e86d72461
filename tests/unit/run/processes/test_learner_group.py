"""The learner group's calls are bounded: a rank that never answers is a `TimeoutError`
naming the call, after the given time and not before."""

from __future__ import annotations

import pytest

from agent_r1_async.run.processes.learner_group import LearnerGroup


class _Ray:
    """`ray.wait` on a fake clock: refs in `answers` are done at their time, others never."""

    def __init__(self, answers: dict[str, float]) -> None:
        self.answers = answers
        self.now = 0.0
        self.timeouts: list[float | None] = []

    def wait(self, refs, num_returns=1, timeout=None):
        self.timeouts.append(timeout)
        ready = sorted((self.answers[r], r) for r in refs if r in self.answers)
        if ready and (timeout is None or ready[0][0] <= self.now + timeout):
            self.now = max(self.now, ready[0][0])
            return [ready[0][1]], [r for r in refs if r != ready[0][1]]
        self.now += timeout or 0.0
        return [], list(refs)

    def get(self, ref):
        return f"result of {ref}"


def _group(ray: _Ray, monkeypatch) -> LearnerGroup:
    group = LearnerGroup.__new__(LearnerGroup)  # only the waiting logic
    group.ray = ray
    monkeypatch.setattr("agent_r1_async.run.processes.learner_group.time.monotonic",
                        lambda: ray.now)
    return group


def test_every_rank_answering_in_time_returns_rank_0s_result(monkeypatch):
    ray = _Ray({"r0": 2.0, "r1": 3.0})
    assert _group(ray, monkeypatch)._wait(["r0", "r1"], 5.0, what="learner save") == "result of r0"
    # Two waits: the second gets what is left of the 5 s after the first answer at 2 s.
    assert ray.timeouts == [5.0, 3.0]


def test_a_rank_that_never_answers_is_a_timeout_naming_the_call(monkeypatch):
    ray = _Ray({"r0": 1.0})  # rank 1 hangs (e.g. a stopped process)
    with pytest.raises(TimeoutError, match=r"^learner save_checkpoint: no answer within 5 s$"):
        _group(ray, monkeypatch)._wait(["r0", "r1"], 5.0, what="learner save_checkpoint")
    assert ray.now == 5.0  # it waited the whole bound, no longer


def test_without_a_bound_the_wait_has_none(monkeypatch):
    ray = _Ray({"r0": 700.0})
    assert _group(ray, monkeypatch)._wait(["r0"]) == "result of r0"
    assert ray.timeouts == [None]

"""The learner group (run/processes/learner_group.py) without Ray: its calls are bounded (a
rank that never answers is a `TimeoutError` naming the call, after the given time and not
before); which failures are deaths that restart the group; what a rank tells the launcher's
liveness watch about its worker thread."""

from __future__ import annotations

import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray.exceptions as rex

from agent_r1_async.run.processes.learner_group import LearnerGroup, LearnerHost
from tests.unit.run.processes.ray_fakes import OOM, SIGKILLED, died


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


class _OutcomeRay:
    """`ray.get` on a ref raises what that ref's task ended with."""

    exceptions = rex

    def __init__(self, outcomes: dict[str, BaseException | None]) -> None:
        self.outcomes = outcomes

    def get(self, ref: str, timeout: float | None = None):
        if self.outcomes[ref] is not None:
            raise self.outcomes[ref]
        return {"metrics": {}}

    def wait(self, refs, timeout=None, num_returns=1):
        return list(refs), []


def _dying(outcomes: dict[str, BaseException | None]) -> LearnerGroup:
    group = LearnerGroup.__new__(LearnerGroup)  # only its decision logic, no processes
    group.ray = _OutcomeRay(outcomes)
    return group


@pytest.mark.parametrize("error", [rex.OutOfMemoryError(OOM), died(SIGKILLED)],
                         ids=["OutOfMemoryError", "ActorDiedError"])
def test_a_learner_killed_mid_update_is_a_death_that_restarts_the_group(error):
    # Ray's memory monitor killing the learner mid-update surfaces as OutOfMemoryError, which
    # is no RayActorError: it must restart the group, not end the launch.
    group = _dying({"r0": error, "r1": None})
    assert group.dead_rank(["r0", "r1"], ["r0", "r1"]) == (0, error)


def test_a_learner_whose_update_raised_still_ends_the_launch():
    bug = rex.RayTaskError("update", "Traceback: ValueError", ValueError("a bug"))
    group = _dying({"r0": bug})
    with pytest.raises(rex.RayTaskError):
        group.dead_rank(["r0"], ["r0"])


def test_a_learner_rank_says_what_its_worker_runs_while_it_runs():
    """The launcher asks `progress()` on Ray's second thread while an update holds the
    worker: it answers at once, naming the update (a long update is alive, not hung)."""
    host = LearnerHost.__new__(LearnerHost)  # no model, no Ray: the worker thread only
    host._worker = ThreadPoolExecutor(1)
    host._doing = ("idle", 0.0)
    computing = {"work_done": 3.0, "work_total": 12.0, "computing_s": 4.0}
    host.learner = types.SimpleNamespace(  # its update's compute, as `Learner.compute_progress`
        compute_progress=lambda: dict(computing) if not release.is_set() else {})
    inside, release = threading.Event(), threading.Event()
    seen: list[dict] = []

    def run_once() -> str:  # named as Learner.run_once is
        inside.set()
        release.wait(10)
        return "updated"

    runner = threading.Thread(target=lambda: seen.append({"result": host._on_worker(run_once)}))
    runner.start()
    assert inside.wait(10)
    during = host.progress()
    release.set()
    runner.join(10)
    after = host.progress()
    host._worker.shutdown()
    assert during["doing"] == "an update" and during["for_s"] >= 0.0
    assert {k: during[k] for k in computing} == computing
    assert seen == [{"result": "updated"}] and after["doing"] == "idle"
    assert set(after) == {"doing", "for_s"}

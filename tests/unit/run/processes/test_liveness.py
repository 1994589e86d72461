"""The one decision of which process is unresponsive (run/processes/liveness.py `Liveness`)."""

from __future__ import annotations

from agent_r1_async.run.processes.liveness import Liveness
from tests.fakes.clock import FakeClock


def test_liveness_names_a_silent_role_once_and_says_when_it_answers_again():
    clock = FakeClock(0.0)
    live = Liveness(30.0, clock)
    clock.t = 29.0
    assert live.observe("buffer", 29.0) is None
    clock.t = 32.0
    assert live.observe("buffer", 30.0) == ("unresponsive", 30.0)  # silent since t = 2
    clock.t = 60.0
    assert live.observe("buffer", 58.0) is None  # said once
    clock.t = 94.0
    assert live.observe("buffer", 0.0) == ("back", 92.0)
    assert live.observe("buffer", 0.0) is None
    clock.t = 200.0
    assert live.observe("actor-1", 45.0) == ("unresponsive", 45.0)
    assert live.observe("actor-1", None) is None  # no report since its loop restarted
    assert live.observe("actor-1", 10.0) is None  # forgotten: no "back" for a new process
    assert Liveness(0.0, clock).observe("buffer", 1e6) is None  # 0: never judged

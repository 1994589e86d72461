"""What the buffer's stats show over time (run/output/watches.py): a launch that cannot make
progress says why, once per stall: which of "actors dead", "every episode refused", "no groups
ready" or "learner waiting" holds; most episodes failing with no group ready is held as
failing."""

from __future__ import annotations

from typing import Any

import pytest

from agent_r1_async.run.output.watches import StallWatch
from tests.fakes.clock import FakeClock
from tests.unit.run.output.stats_fakes import T0, actor, buffer


def _watch(looks: list[dict[str, Any]], step_s: float = 10.0) -> list[tuple[str, str] | None]:
    """What `observe` says at each look, `step_s` apart (the buffer's clock moves too)."""
    clock = FakeClock(0.0)
    watch = StallWatch(clock=clock)
    said = []
    for look in looks:
        said.append(watch.observe(look))
        clock.advance(step_s)
    return said


def test_every_episode_refused_is_said_once_after_the_stall_time():
    # Looks 10 s apart: the first is the baseline (7 refusals of an earlier time); then the
    # buffer refuses 5 records every 10 s.
    looks = [buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, done=2 * i)},
                     invalid_record=7 + 5 * i, invalid_record__token_id=7,
                     invalid_record__reward=5 * i) for i in range(8)]
    said = _watch(looks)
    assert said[:6] == [None] * 6  # 50 s without progress: not yet
    assert said[6] == ("every episode refused",
                       "no progress for 60 s: every episode refused: the buffer refused 30 "
                       "records (reward 30) and no group became ready")
    assert said[7] is None  # said once per stall


def test_no_groups_ready_names_the_latest_failure():
    looks = [buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, done=1, failed=3 * i,
                                                     last_error="env_error in env e: boom")},
                     ready=1) for i in range(7)]
    assert _watch(looks)[6] == ("no groups ready",
                                "no progress for 60 s: no groups ready: actors ended 18 "
                                "episodes (18 failed; latest failure: env_error in env e: boom) "
                                "and none made a group ready")


def test_actors_dead_when_no_report_is_newer_than_the_stall_time():
    # actor-0 last reported at T0 - 5; the buffer's clock moves on.
    looks = [buffer(T0 + 10 * i, {"actor-0": actor(T0 - 5)}) for i in range(7)]
    assert _watch(looks)[6] == ("actors dead",
                                "no progress for 60 s: actors dead: no actor has reported in "
                                "the last 60 s (last reports: actor-0 65 s ago)")


def test_before_any_actor_reported_a_stall_waits_for_start_up():
    looks = [buffer(T0 + 10 * i, {}) for i in range(20)]
    said = _watch(looks)
    assert said[:18] == [None] * 18  # engines may take minutes to load: 3 x STALL_S
    assert said[18] == ("actors dead", "no progress for 180 s: actors dead or not started: "
                                       "no actor has reported yet")


@pytest.mark.parametrize("progress", [
    {"version": 1},  # a new learner version
    {"ready": 1},  # a group became ready
    {"sampled": 2},  # the learner took groups
])
def test_progress_restarts_the_wait(progress):
    def look(i: int, **kw: int) -> dict[str, Any]:
        return buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, failed=i)}, **kw)

    looks = [look(i) for i in range(5)] + [look(5, **progress)]
    looks += [look(i, **progress) for i in range(6, 12)]
    said = _watch(looks)
    assert said[:11] == [None] * 11  # 50 s, progress at 50 s, then 50 s more
    assert said[11] is not None and said[11][0] == "no groups ready"
    assert said[11][1].startswith("no progress for 60 s: ")


def test_a_learner_busy_with_a_long_update_is_not_a_stall():
    # Actors report but end nothing (admission control holds them); nothing is refused.
    looks = [buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, done=8)}) for i in range(60)]
    assert _watch(looks) == [None] * 60


def test_a_learner_waiting_on_a_hung_actors_groups_says_what_it_waits_on():
    """The hung-actor drill: ready 1, in flight 3 held by the frozen actor-1, the learner's
    sample request waiting for 2, the healthy actor-0 idle (no credits): nothing ended and
    nothing was refused, so nothing was said for 180 s."""
    def look(i: int) -> dict[str, Any]:
        b = buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, done=8),
                                  "actor-1": actor(T0 - 2, done=5)}, version=14, ready=1,
                    sampled=28)
        return {**b, "sample_waiting": 2, "in_flight_groups": 3,
                "actor_credits": {"actor-0": 0, "actor-1": 3},
                "actor_silence_s": {"actor-0": 0.4, "actor-1": 2.0 + 10 * i}}

    said = _watch([look(i) for i in range(8)])
    assert said[:6] == [None] * 6
    assert said[6] == ("learner waiting",
                       "no progress for 60 s: the learner waits for 2 ready groups; the buffer "
                       "has 1 ready and 3 in flight (actor-1 holds 3, no progress for 62 s)")
    assert said[7] is None
    # With its sample request answered (the learner in a long update), nothing is said.
    idle = [{**look(i), "sample_waiting": 0} for i in range(8)]
    assert _watch(idle) == [None] * 8


def test_an_actor_restart_does_not_count_negative_episodes():
    # At 20 s actor-0 restarts: its totals fall from 40 to 0, then grow by 1 per look.
    ended = [30, 35, 0, 1, 2, 3, 4, 5, 6]
    looks = [buffer(T0 + 10 * i, {"actor-0": actor(T0 + 10 * i, failed=n)})
             for i, n in enumerate(ended)]
    said = _watch(looks)
    assert said[6] is not None and "actors ended 4 episodes (4 failed)" in said[6][1]


def test_most_episodes_failing_with_no_group_ready_is_held_as_failing():
    """A server that serves 1 episode of each group of 8: 7 of every 8 episodes fail, no
    group is ever whole. `failing` holds the line from the stall time on, with the seconds
    (the supervisor stops at launch.stop_after_stall_s); a few failures among successes, or
    progress, clear it."""
    clock = FakeClock(0.0)
    watch = StallWatch(clock=clock)
    err = "env_error in env openenv: it refused a new session: CAPACITY_REACHED"
    for i in range(8):  # 8 episodes ended per look, 7 failed
        watch.observe(buffer(T0 + 10 * i, {"actor-0": actor(
            T0 + 10 * i, done=i, failed=7 * i, last_error=err)}))
        if i < 6:
            assert watch.failing is None
        clock.advance(10.0)
    assert watch.failing == (70.0, "no progress for 70 s: no groups ready: actors ended 56 "
                                   f"episodes (49 failed; latest failure: {err}) and none made "
                                   "a group ready")
    watch.observe(buffer(T0 + 80, {"actor-0": actor(T0 + 80, done=8, failed=56)}, ready=1))
    assert watch.failing is None  # progress
    for i in range(9, 17):  # then 1 of every 8 fails: most succeed, nothing is held
        clock.advance(10.0)
        watch.observe(buffer(T0 + 10 * i, {"actor-0": actor(
            T0 + 10 * i, done=8 + 7 * (i - 8), failed=56 + (i - 8))}, ready=1))
    assert watch.failing is None

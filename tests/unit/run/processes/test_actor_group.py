"""The actors' supervision (run/processes/actor_group.py) without Ray: a dead actor's loop is
re-run against the current endpoints after the buffer gives back what it held; an unresponsive
one is reclaimed, killed for Ray to restart and its loop re-run; each says so in one line."""

from __future__ import annotations

import types

from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.processes.actor_group import ActorGroup
from agent_r1_async.run.processes.liveness import Liveness
from agent_r1_async.run.processes.nodes import NodeWatch
from tests.unit.run.processes.ray_fakes import (
    SIGKILLED,
    BufferCalls,
    Handle,
    OrderRay,
    bare_actor_group,
    died,
)


def _group(tmp_path, calls: list[str], num_actors: int, bound_s: float = 0.0, clock=None,
           reclaimed: dict[str, int] | None = None) -> ActorGroup:
    """An ActorGroup of `num_actors` recorded actor handles, no processes."""
    return bare_actor_group(
        OrderRay(), types.SimpleNamespace(actors=types.SimpleNamespace(max_restarts=3)),
        [Handle(f"actor-{i}", calls, {}) for i in range(num_actors)],
        Liveness(bound_s, clock) if clock is not None else Liveness(bound_s),
        BufferCalls(calls, reclaimed),
        Events(Console(tmp_path / "logs", live=False), tmp_path, num_actors, 1000),
        {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://w"},
        NodeWatch(lambda: []).place, tmp_path)


def test_an_actor_restarted_by_ray_gets_the_current_endpoints_before_its_loop_reruns(
        capsys, tmp_path):
    """Ray re-runs a restarted actor's constructor with launch-time endpoints; after a learner
    restart the weights are published elsewhere (the kill drill's actor-0 served v0 forever)."""
    calls: list[str] = []
    dead_run = Handle("actor-0", [], {"run": died(SIGKILLED)}).run.remote()
    group = _group(tmp_path, calls, 1)
    group.runs = {dead_run: 0}
    group.endpoints = {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://new-learner"}
    group.check(14)
    # What the dead process held in the buffer comes back before the new loop runs.
    assert calls == ["buffer.reclaim actor-0", "actor-0.pid", "actor-0.set_endpoints",
                     "actor-0.where", "actor-0.run"]
    assert group.handles[0].args["set_endpoints"] == (group.endpoints,)
    assert group.restarts == [1] and list(group.runs.values()) == [0]
    assert capsys.readouterr().out.splitlines() == [
        "[launch] actor-0 died: killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer "
        f"or a crash); log: {tmp_path}/logs/actor-0.log",
        "[launch] actor-0 restarted by Ray (1 of 3 restarts); its loop runs again; discarded in "
        "flight: no episode"]


def test_an_unresponsive_actor_is_reclaimed_then_killed_and_its_loop_rerun(tmp_path, capsys):
    """A SIGSTOPped actor kept its credits and the healthy actor got none: 0 updates in 180 s.
    Past the bound the buffer takes its credits back, its process is killed through Ray, and
    the launcher's death path re-runs the loop of the process Ray starts instead."""
    from tests.fakes.clock import FakeClock

    clock = FakeClock(0.0)
    calls: list[str] = []
    # The buffer's answer: 3 credits, 2 unfinished episodes of 3 and 14 steps discarded.
    group = _group(tmp_path, calls, 2, bound_s=30.0, clock=clock,
                   reclaimed={"credits": 3, "episodes": 2, "discarded": 2, "steps": 17,
                              "tokens": 1234, "le_4": 1, "le_16": 1})
    group.ray.kill = lambda handle, no_restart: calls.append(f"kill {handle.name} {no_restart}")
    stats = {"actor_silence_s": {"actor-0": 0.5, "actor-1": 29.9},
             "actor_credits": {"actor-1": 3},
             "actors": {"actor-1": {"policy_version": 14, "episodes_in_flight": 2}}}
    group.watch(stats, 14)
    assert calls == []
    stats["actor_silence_s"]["actor-1"] = 31.0
    group.watch(stats, 14)
    assert calls == ["buffer.reclaim actor-1", "kill actor-1 False"]
    stats["actor_silence_s"]["actor-1"] = 60.0
    group.watch(stats, 14)  # being replaced: not judged again
    assert len(calls) == 2

    # Ray restarts the process; the old one's loop call fails: the death path re-runs it,
    # after a reclaim that finds nothing left; its restart line says what the first discarded.
    group.buffers.reclaimed = {"credits": 0, "episodes": 0, "discarded": 0, "steps": 0,
                               "tokens": 0}
    group.runs = {Handle("actor-1", [], {"run": died(SIGKILLED)}).run.remote(): 1}
    group.check(14)
    assert calls[2:] == ["buffer.reclaim actor-1", "actor-1.pid", "actor-1.set_endpoints",
                         "actor-1.where", "actor-1.run"]
    assert group.restarts == [0, 1] and group.replacing == {}
    group.watch({"actor_silence_s": {"actor-0": 0.2}}, 14)  # the new one has not reported
    group.watch({"actor_silence_s": {"actor-0": 0.2, "actor-1": 2.0}}, 14)
    assert len(calls) == 7
    logs = tmp_path / "logs"
    assert capsys.readouterr().out.splitlines() == [
        "[launch] actor-1 unresponsive for 31 s: last report at v14, 2 episodes in flight, "
        "3 credits held; reclaimed 3 credits and 2 unfinished episodes; killing its process "
        "for Ray to restart",
        f"[launch] actor-1 died: killed by the launcher: unresponsive for 31 s; log: "
        f"{logs}/actor-1.log",
        "[launch] actor-1 restarted by Ray (1 of 3 restarts); its loop runs again; discarded in "
        "flight: 2 episodes (17 steps: 1 of <=4, 1 of <=16; 1,234 generated tokens)"]
    assert group.discarded == {}
    stats["actor_silence_s"]["actor-1"] = 30.0  # hung again: named and replaced again
    group.watch(stats, 14)
    assert calls[7:] == ["buffer.reclaim actor-1", "kill actor-1 False"]

"""What the supervisor does across roles, without running Ray: the bounded stop (the buffer's
snapshot before the learner's checkpoint), a learner group rebuilt after a rank's death (the
buffer first, the restart line), a frozen buffer or learner named and never killed, the
learner and actors following a buffer that moved, and the run stopped when episodes keep
failing."""

from __future__ import annotations

import json
import types

import pytest
import ray.exceptions as rex

from agent_r1_async.disk import DiskFullError
from agent_r1_async.run.launch import lost_final_checkpoint
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events
from agent_r1_async.run.processes.learner_group import RankWatch
from agent_r1_async.run.processes.liveness import Liveness, Probe
from agent_r1_async.run.processes.nodes import NodeWatch
from agent_r1_async.run.processes.supervisor import EnvFailing, Supervisor
from tests.unit.run.processes.ray_fakes import (
    OOM,
    SIGKILLED,
    BufferCalls,
    Handle,
    OrderRay,
    Pending,
    ProbeRay,
    bare_actor_group,
    died,
)

_MAX_RESTARTS_3 = types.SimpleNamespace(actors=types.SimpleNamespace(max_restarts=3))


def _supervisor() -> Supervisor:
    sup = Supervisor.__new__(Supervisor)  # only its decision logic, no processes
    sup.ray = types.SimpleNamespace(exceptions=rex)
    return sup


def _bare_supervisor(tmp_path, calls: list[str], num_actors: int, bound_s: float = 0.0,
                     clock=None) -> Supervisor:
    """A Supervisor with `num_actors` recorded actor handles, no processes."""
    sup = Supervisor.__new__(Supervisor)
    sup.ray = OrderRay()
    sup.liveness = Liveness(bound_s, clock) if clock is not None else Liveness(bound_s)
    sup.buffers, sup.last_version, sup.run_dir = BufferCalls(calls), 14, tmp_path
    sup.endpoints = {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://w"}
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, num_actors, 1000)
    sup.nodes = NodeWatch(lambda: [])
    sup.actors = bare_actor_group(
        sup.ray, _MAX_RESTARTS_3, [Handle(f"actor-{i}", calls, {}) for i in range(num_actors)],
        sup.liveness, sup.buffers, sup.events, sup.endpoints, sup.nodes.place, tmp_path)
    return sup


def test_the_final_snapshot_is_written_before_the_final_checkpoint(capsys, tmp_path):
    """A final checkpoint that finds the disk full cannot cost the buffer's state: the buffer
    snapshots first; the checkpoint's failure is one line saying the disk is full."""
    from agent_r1_async.config import config_from_dict

    calls: list[str] = []
    bounds: list[float | None] = []
    full = DiskFullError("disk full: checkpoint step-9 could not be written under /r")

    class _Learner:
        def call(self, method, timeout_s=None):
            calls.append(f"learner.{method}")
            bounds.append(timeout_s)
            if method == "save_checkpoint":
                raise rex.RayTaskError("save_checkpoint", "Traceback ...", full)

        def kill(self):
            calls.append("learner.kill")

    sup = Supervisor.__new__(Supervisor)
    sup.cfg = config_from_dict({"launch": {"stop_timeout_s": 7}})
    sup.ray = OrderRay()
    sup.actors = bare_actor_group(sup.ray, _MAX_RESTARTS_3, [Handle("actor-0", calls, {})],
                                  None, None, None, {}, None, tmp_path)
    sup.learner = _Learner()
    sup.buffers = types.SimpleNamespace(handle=Handle("buffer", calls, {}))
    sup.run_dir = tmp_path
    sup.events = Events(Console(None, live=False), tmp_path, 1, 1000)
    assert sup.shutdown(checkpoint=True) is None
    assert calls == ["actor-0.stop", "buffer.snapshot", "learner.stop_waiting",
                     "learner.save_checkpoint", "learner.kill", "buffer.stop"]
    assert bounds == [7, 7]  # every learner call of the stop is bounded by launch.stop_timeout_s
    assert sup.unsaved == ["the learner checkpoint"]  # the snapshot was saved, the checkpoint not
    assert f"[launch] error: final learner checkpoint failed: {full}" in capsys.readouterr().err
    # ... and the launch exits 1 with it: no periodic checkpoint here, so every update is lost
    assert sup.checkpoint_error == str(full)
    assert lost_final_checkpoint(sup.checkpoint_error, tmp_path) == (
        f"the final checkpoint failed ({full}): the updates since the start "
        "(no periodic checkpoint) are lost")


def test_a_learner_restart_first_restarts_a_buffer_the_memory_monitor_took_too(
        monkeypatch, tmp_path, capsys):
    """Ray's memory monitor killed the buffer, the learner and both actors at once in a drill
    run; the new learner's handshake then waited on the dead buffer. The buffer comes first."""
    from agent_r1_async.run.processes import supervisor as sup_mod

    calls: list[str] = []

    class _Group:
        def __init__(self, *args, **kwargs) -> None:
            calls.append("learner.start")
            self.leader = Handle("learner", calls, {})
            self.ranks = [self.leader]

        def call(self, method: str) -> None:
            calls.append(f"learner.{method}")

        def kill(self) -> None:
            calls.append("learner.kill")

    # The buffer's drops before the actors' loops restart, and after: the stopped loops'
    # aborted episode (failed_episode, 2 steps, 100 tokens) and a reclaimed one (12 steps).
    before = {"stale": 5, "length/dropped/failed_episode/le_4": 1,
              "length/dropped_steps/failed_episode/le_4": 3,
              "length/dropped_tokens/failed_episode": 300, "length/generated/le_4": 9}
    after = {**before, "length/dropped/failed_episode/le_4": 2,
             "length/dropped_steps/failed_episode/le_4": 5,
             "length/dropped_tokens/failed_episode": 400,
             "length/dropped/reclaimed_episode/le_16": 1,
             "length/dropped_steps/reclaimed_episode/le_16": 12,
             "length/dropped_tokens/reclaimed_episode": 900, "length/generated/le_4": 10}
    answers = [before, after]

    class _Buffers:
        def ensure_alive(self, version: int) -> None:
            calls.append(f"buffer.ensure_alive(v{version})")

        def call(self, method: str, timeout=None, learner_version=None):
            calls.append(f"buffer.{method}")
            return {"drops": answers.pop(0)}

    class _Ray(OrderRay):
        def get(self, ref, timeout=None):
            out = super().get(ref, timeout)
            return 6 if out == "learner.version" else out

    monkeypatch.setattr(sup_mod, "LearnerGroup", _Group)
    (tmp_path / "checkpoints" / "step-6").mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").symlink_to("step-6")
    sup = Supervisor.__new__(Supervisor)
    sup.ray, sup.run_dir, sup.curve = _Ray(), tmp_path, None
    sup.cfg = types.SimpleNamespace(learner=types.SimpleNamespace(max_restarts=3, world_size=1))
    sup.learner, sup.buffers = _Group(), _Buffers()
    sup.endpoints, sup.learner_restarts, sup.last_version = {"control": "tcp://c"}, 0, 7
    sup.nodes = NodeWatch(lambda: [])
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, 1, 1000)
    sup.actors = bare_actor_group(sup.ray, _MAX_RESTARTS_3, [], Liveness(0.0), sup.buffers,
                                  sup.events, sup.endpoints, sup.nodes.place, tmp_path)
    calls.clear()
    sup.restart_learner(0, rex.OutOfMemoryError(OOM))
    assert calls == ["learner.kill", "buffer.ensure_alive(v7)", "learner.start",
                     "learner.version", "learner.weights_endpoint", "learner.where",
                     "buffer.stats", "buffer.stats", "learner.publish"]
    line = capsys.readouterr().out
    assert line == ("[launch] learner rank 0 failed: out of memory (Ray's memory monitor killed "
                    f"it, node memory 22.5GB of 23.4GB); log: {tmp_path}/logs/learner-0.log; "
                    "restarting the learner group (1 ranks) from "
                    f"{tmp_path}/checkpoints/step-6 (version 6; updates 7..7 are redone, not "
                    "logged again) (1 of 3 restarts); discarded in flight: 2 episodes (14 steps: "
                    "1 of <=4, 1 of <=16; 1,000 generated tokens)\n")


def test_a_learner_group_killed_while_restarting_is_restarted_again():
    """A drill run under memory pressure: the memory monitor killed the *new* learner before
    its first reply, and that OutOfMemoryError ended the launch. It is one more restart."""
    first, second = died(SIGKILLED), rex.OutOfMemoryError(OOM)
    tries: list[tuple[int, BaseException]] = []

    def restart(rank: int, error: BaseException) -> None:
        tries.append((rank, error))
        if len(tries) == 1:
            raise second

    sup = _supervisor()
    sup.restart_learner = restart
    sup._restart_until_up(1, first)
    assert tries == [(1, first), (0, second)]


def test_a_learner_group_that_never_comes_up_ends_the_launch_at_max_restarts(monkeypatch):
    from agent_r1_async.run.processes import supervisor as sup_mod

    class _Group:
        def __init__(self, *args, **kwargs) -> None:
            raise rex.OutOfMemoryError(OOM)

        def kill(self) -> None:
            pass

    class _Buffers:
        def ensure_alive(self, version: int) -> None:
            pass

    monkeypatch.setattr(sup_mod, "LearnerGroup", _Group)
    sup = _supervisor()
    sup.run_dir, sup.curve, sup.buffers = "/nonexistent", None, _Buffers()
    sup.learner, sup.learner_restarts, sup.last_version = _Group.__new__(_Group), 0, 3
    sup.cfg = types.SimpleNamespace(learner=types.SimpleNamespace(max_restarts=3, world_size=1))
    sup.endpoints = {"control": "tcp://c"}
    with pytest.raises(RuntimeError, match="restarted 3 times"):
        sup._restart_until_up(0, died(SIGKILLED))
    assert sup.learner_restarts == 4  # three tries that died starting, the fourth refused


def test_a_frozen_buffer_or_learner_is_named_after_the_bound_and_when_it_answers(
        tmp_path, capsys):
    """A buffer or learner frozen for 90 s (SIGSTOP) came back 0.5 s after SIGCONT, with no
    console line meanwhile. Each is named once after launch.unresponsive_s (30 s here) and
    again when it answers; neither is killed (run/processes/liveness.py says why)."""
    from tests.fakes.clock import FakeClock

    clock = FakeClock(0.0)
    calls: list[str] = []
    sup = _bare_supervisor(tmp_path, calls, 0, bound_s=30.0, clock=clock)
    sup.ray = ProbeRay()
    frozen = {"buffer": False, "learner": False}
    stats = {"learner_version": 14, "groups_ready": 1, "in_flight_groups": 3}
    refs: dict[str, list[Pending]] = {"buffer": [], "learner": []}

    def ask(role: str, answer: dict):
        def call() -> Pending:
            refs[role].append(Pending(answer, not frozen[role]))
            return refs[role][-1]
        return call

    sup._buffer_probe = Probe(sup.ray, ask("buffer", stats), 2.0, clock)
    sup._last_stats = {}
    learner = RankWatch(sup.ray, sup.liveness, sup.events, tmp_path / "logs")
    learner.probes = [Probe(sup.ray, ask("learner", {"doing": "an update", "for_s": 4.0}), 2.0,
                            clock)]
    assert sup.poll_buffer() == stats  # t = 0: answered at once
    learner.look()
    frozen.update(buffer=True, learner=True)
    for t in (2.0, 31.0):  # a request goes out at t = 2 and stays unanswered
        clock.t = t
        assert sup.poll_buffer() is None
        learner.look()
    assert capsys.readouterr().out == ""  # 29 s: not yet
    clock.t = 32.0
    sup.poll_buffer()
    learner.look()
    clock.t = 60.0
    sup.poll_buffer()
    learner.look()
    refs["learner"][-1].ready = True  # SIGCONT the learner at t = 72
    clock.t = 72.0
    learner.look()
    refs["buffer"][-1].ready = True  # and the buffer at t = 94
    clock.t = 94.0
    assert sup.poll_buffer() == stats
    logs = tmp_path / "logs"
    assert capsys.readouterr().out.splitlines() == [
        "[launch] buffer unresponsive for 30 s: no answer to the launcher since it was at "
        f"version 14 (groups: 1 ready, 3 in flight); log: {logs}/buffer.log",
        "[launch] learner unresponsive for 30 s: its last answer: an update for 4 s; log: "
        f"{logs}/learner-0.log",
        "[launch] learner responsive again after 70 s",
        "[launch] buffer responsive again after 92 s"]
    assert calls == []  # nothing killed, nothing reclaimed


def test_after_the_buffer_moved_the_learner_and_the_actors_follow_it(tmp_path):
    calls: list[str] = []
    sup = _bare_supervisor(tmp_path, calls, 2)
    sup.buffers.moved = True
    sup.buffers.endpoints = {"data": "tcp://new:1", "control": "tcp://new:2"}
    sup.buffers.where = {"node_id": "n3", "ip": "127.0.0.3"}
    sup.learner = types.SimpleNamespace(ranks=[Handle("learner", calls, {})])
    sup._follow_buffer()
    assert sup.endpoints == {"data": "tcp://new:1", "control": "tcp://new:2",
                             "weights": "tcp://w"}
    assert sup.learner.ranks[0].args["set_buffer"] == ("tcp://new:2",)
    assert calls[:4] == ["learner.set_buffer", "buffer.stats", "actor-0.stop", "actor-1.stop"]
    assert [c for c in calls if c.endswith(("set_endpoints", ".run"))] == [
        "actor-0.set_endpoints", "actor-1.set_endpoints", "actor-0.run", "actor-1.run"]
    assert not sup.buffers.moved and sup.nodes.where["buffer"]["ip"] == "127.0.0.3"
    assert json.loads((tmp_path / "endpoints.json").read_text()) == sup.endpoints  # operators
    sup._follow_buffer()  # followed once
    assert calls.count("learner.set_buffer") == 1


def test_episodes_failing_with_no_group_ready_stop_the_run_after_the_bound(tmp_path):
    """Most episodes failing (some succeed, none completes a group) stops the run once the
    stall has lasted launch.stop_after_stall_s, naming the latest failure; 0 never stops."""
    from agent_r1_async.config import config_from_dict

    def sup_with(limit: float) -> Supervisor:
        sup = Supervisor.__new__(Supervisor)
        sup.cfg = config_from_dict({"launch": {"stop_after_stall_s": limit}})
        sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, 1, 2)
        return sup

    stops, never = sup_with(300), sup_with(0)
    for sup in (stops, never):
        sup.events.watch = lambda _stats: None  # type: ignore[method-assign]
    line = ("no progress for 300 s: no groups ready: actors ended 56 episodes (49 failed; "
            "latest failure: boom) and none made a group ready")
    for sup in (stops, never):
        sup.events.stall.failing = (299.0, line)
        sup.check_failures({"actors": {}})  # not yet
    stops.events.stall.failing = never.events.stall.failing = (300.0, line)
    with pytest.raises(EnvFailing) as err:
        stops.check_failures({"actors": {}})
    assert str(err.value) == f"{line} (launch.stop_after_stall_s=300)"
    never.check_failures({"actors": {}})


def _stopping_supervisor(tmp_path, learner) -> Supervisor:
    """A supervisor with only what `shutdown` and `update_left_s` touch: a 300 s
    `launch.stop_timeout_s`, no actors, `learner` as its learner group."""
    from agent_r1_async.config import config_from_dict

    sup = Supervisor.__new__(Supervisor)
    sup.cfg = config_from_dict({"launch": {"stop_timeout_s": 300}})
    sup.ray = OrderRay()
    sup.actors = bare_actor_group(sup.ray, _MAX_RESTARTS_3, [], None, None, None, {}, None,
                                  tmp_path)
    sup.learner = learner
    sup.buffers = types.SimpleNamespace(handle=Handle("buffer", [], {}))
    sup.run_dir = tmp_path
    sup.events = Events(Console(None, live=False), tmp_path, 1, 1000)
    return sup


def _checkpointing_learner(bounds: list, path: str, progress=None):
    """A learner group whose calls record their `timeout_s` in `bounds` and whose
    `save_checkpoint` returns `path`; rank 0's `progress` calls `progress` (none: no leader,
    so the supervisor's probe of it fails as a silent rank's would)."""
    class _Learner:
        def call(self, method, timeout_s=None):
            bounds.append(timeout_s)
            return path if method == "save_checkpoint" else None

    if progress is not None:
        _Learner.leader = types.SimpleNamespace(progress=types.SimpleNamespace(
            remote=lambda: progress))
    return _Learner()


def test_the_final_checkpoint_waits_for_the_update_in_progress_beyond_the_bound(
        capsys, tmp_path, monkeypatch):
    """A world launch stopped at its wall clock while an update that computes for ~770 s ran
    lost its final checkpoint to the 300 s bound (the checkpoint queues behind the update).
    The bound now adds what the update may still need: 1.5 × the longest compute so far
    (800 s of update less 40 s of data wait = 760 s: 1,140 s) less its 600 s so far."""
    from agent_r1_async.run.processes import supervisor as sup_mod

    bounds: list[float | None] = []

    now = [1000.0]
    monkeypatch.setattr(sup_mod.time, "monotonic", lambda: now[0])
    sup = _stopping_supervisor(tmp_path, _checkpointing_learner(bounds, "/r/checkpoints/step-3"))
    assert sup.update_left_s() == 0.0  # no update in progress
    sup._updated({"metrics": {"version": 2, "update_time_s": 800.0, "data_wait_s": 40.0}})
    sup._update_started = now[0]  # the next update starts
    now[0] += 600.0
    assert sup.update_left_s() == pytest.approx(1.5 * 760.0 - 600.0)
    assert sup.shutdown(checkpoint=True) == "/r/checkpoints/step-3"
    assert bounds == [30.0, pytest.approx(300.0 + 540.0)]
    assert ("[launch] stopping: the update in progress (the longest so far computed for 760 s) "
            "ends before the checkpoint; waiting up to 840 s") in capsys.readouterr().out


def test_a_first_update_still_computing_gets_the_time_its_progress_extrapolates(
        capsys, tmp_path, monkeypatch):
    """No update has finished to go by (a long-horizon run's first can outlast the whole
    wall-clock budget): rank 0 reports 12 of its 48 forward passes of work done in 200 s, so
    the whole compute extrapolates to 800 s and the stop may wait 1.5 × 800 − 200 = 1,000 s
    beyond the 300 s bound. Where rank 0 does not answer, nothing is added."""
    from agent_r1_async.run.processes import supervisor as sup_mod

    bounds: list[float | None] = []
    answer: list[dict | None] = [{"doing": "an update", "for_s": 900.0, "work_done": 12.0,
                                  "work_total": 48.0, "computing_s": 200.0}]

    def progress():  # the reference: OrderRay.get calls it
        if answer[0] is None:
            raise TimeoutError("no answer")
        return answer[0]

    monkeypatch.setattr(sup_mod.time, "monotonic", lambda: 5000.0)
    sup = _stopping_supervisor(tmp_path, _checkpointing_learner(
        bounds, "/r/checkpoints/step-1", progress=progress))
    sup._update_started = 4100.0  # the first update, 900 s ago (700 of them waiting for data)
    assert sup.update_left_s() == pytest.approx(1000.0)
    assert sup.shutdown(checkpoint=True) == "/r/checkpoints/step-1"
    assert bounds == [30.0, pytest.approx(1300.0)]
    assert ("[launch] stopping: the update in progress (the first, 25% of its work done in "
            "200 s) ends before the checkpoint; waiting up to 1300 s") in capsys.readouterr().out
    answer[0] = {"doing": "an update", "for_s": 900.0}  # waiting for data: no compute yet
    assert sup.update_left_s() == 0.0
    answer[0] = None
    assert sup.update_left_s() == 0.0


def test_a_later_update_is_judged_by_its_own_progress_and_compute(
        capsys, tmp_path, monkeypatch):
    """A CoinCollector launch stopped at its wall clock lost two updates: its third update had
    computed for ~950 s, past 1.5 × the longest before it (~400 s), and the stop went by that
    rule alone, less the time since the update was asked for (its wait for data included), so
    the checkpoint behind it had only the 300 s bound. Here the update was asked for 1,100 s
    ago and rank 0 reports 4 of 40 forward passes done in 100 s of compute: the longest-so-far
    rule leaves 1.5 × 400 − 100 = 500 s, the extrapolation 1.5 × 100 × 40 / 4 − 100 =
    1,400 s, and the longer stands."""
    from agent_r1_async.run.processes import supervisor as sup_mod

    bounds: list[float | None] = []
    answer: list[dict] = [{"doing": "an update", "for_s": 1100.0, "work_done": 4.0,
                           "work_total": 40.0, "computing_s": 100.0}]

    now = [1000.0]
    monkeypatch.setattr(sup_mod.time, "monotonic", lambda: now[0])
    sup = _stopping_supervisor(tmp_path, _checkpointing_learner(
        bounds, "/r/checkpoints/step-3", progress=lambda: answer[0]))
    sup._updated({"metrics": {"version": 2, "update_time_s": 445.0, "data_wait_s": 45.0}})
    sup._update_started = now[0]
    now[0] += 1100.0
    assert sup.update_left_s() == pytest.approx(1400.0)
    assert sup.shutdown(checkpoint=True) == "/r/checkpoints/step-3"
    assert bounds == [30.0, pytest.approx(1700.0)]
    assert ("[launch] stopping: the update in progress (this one, 10% of its work done in "
            "100 s) ends before the checkpoint; waiting up to 1700 s") in capsys.readouterr().out
    answer[0] = {"doing": "an update", "for_s": 1100.0, "work_done": 36.0, "work_total": 40.0,
                 "computing_s": 300.0}  # nearly done: the longest-so-far rule is the longer
    assert sup.update_left_s() == pytest.approx(1.5 * 400.0 - 300.0)
    answer[0] = {"doing": "an update", "for_s": 1100.0}  # still waiting for data
    assert sup.update_left_s() == 0.0

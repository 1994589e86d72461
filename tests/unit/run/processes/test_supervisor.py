"""Supervision decisions that need no running Ray: which learner failures are deaths (and
restart the group), what the one restart line says, and a full disk behind Ray's task error."""

from __future__ import annotations

import json
import re
import types

import pytest
import ray.exceptions as rex

from agent_r1_async.learner.checkpoint_files import DiskFullError, disk_full_message
from agent_r1_async.run.launch import lost_final_checkpoint
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events, death_cause
from agent_r1_async.run.processes.nodes import NodeWatch
from agent_r1_async.run.processes.supervisor import Supervisor

_SIGKILLED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: LearnerHost"
              "\n\tpid: 1234\nThe actor is dead because its worker process has died. Worker "
              "exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
              "connection error code 2. End of file.")
_OOM = ("Task was killed due to the node running low on memory.\nMemory on the node (IP: "
        "10.0.0.1) where the task was running was 22.5GB / 23.4GB (0.96), which exceeds the "
        "memory usage threshold of 0.95. Ray killed this worker because it was the most "
        "recently scheduled task")


def _Died(text: str) -> rex.ActorDiedError:
    """An ActorDiedError with the text Ray gives it (the cause is a protobuf in real life)."""
    e = rex.ActorDiedError()
    e.error_msg = text
    return e


class _FakeRay:
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


def _supervisor(outcomes: dict[str, BaseException | None]) -> Supervisor:
    sup = Supervisor.__new__(Supervisor)  # only its decision logic, no processes
    sup.ray = _FakeRay(outcomes)
    return sup


@pytest.mark.parametrize("error", [rex.OutOfMemoryError(_OOM), _Died(_SIGKILLED)],
                         ids=["OutOfMemoryError", "ActorDiedError"])
def test_a_learner_killed_mid_update_is_a_death_that_restarts_the_group(error):
    # Ray's memory monitor killing the learner mid-update surfaces as OutOfMemoryError, which
    # is no RayActorError: it must restart the group, not end the launch.
    sup = _supervisor({"r0": error, "r1": None})
    assert sup._dead_rank(["r0", "r1"], ["r0", "r1"]) == (0, error)


def test_a_learner_whose_update_raised_still_ends_the_launch():
    bug = rex.RayTaskError("update", "Traceback: ValueError", ValueError("a bug"))
    sup = _supervisor({"r0": bug})
    with pytest.raises(rex.RayTaskError):
        sup._dead_rank(["r0"], ["r0"])


def test_the_buffer_and_the_learner_share_one_cause_of_death():
    """The buffer's restart line says why in the same words as the learner's and the actors'
    (run/output/events.py `death_cause`; the buffer once had its own, terser, copy)."""
    assert death_cause(rex.OutOfMemoryError(_OOM)) == (
        "out of memory (Ray's memory monitor killed it, node memory 22.5GB of 23.4GB)")
    assert death_cause(_Died(_SIGKILLED)) == (
        "killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer or a crash)")
    assert death_cause(_Died("killed by the memory monitor")) == (
        "out of memory (Ray's memory monitor killed it)")
    assert death_cause(rex.ActorUnavailableError("restarting", None)) == (
        "its process ended (Ray recorded no reason; see its log)")


def test_a_full_disk_behind_rays_task_error_is_found():
    full = DiskFullError("disk full: checkpoint step-4 could not be written under /r")
    wrapped = rex.RayTaskError("update", "Traceback (most recent call last): ...", full)
    assert disk_full_message(wrapped) == str(full)
    assert disk_full_message(wrapped.as_instanceof_cause()) == str(full)
    assert disk_full_message(rex.RayTaskError("update", "tb", ValueError("x"))) is None
    assert disk_full_message(ValueError("disk full")) is None


class _Handle:
    """A Ray actor handle whose `.method.remote()` runs `method` when `ray.get` asks."""

    def __init__(self, name: str, calls: list[str], fail: dict[str, BaseException]) -> None:
        self.name, self.calls, self.fail = name, calls, fail
        self.args: dict[str, tuple] = {}

    def __getattr__(self, method: str):
        def run():
            if method in self.fail:
                raise self.fail[method]
            if method == "where":
                return {"node_id": "n0", "ip": "127.0.0.1"}
            return f"{self.name}.{method}"

        def remote(*args):
            self.calls.append(f"{self.name}.{method}")
            self.args[method] = args
            return run
        return types.SimpleNamespace(remote=remote)


class _Call:
    """A Ray actor method whose `.remote()` is its answer (with `ray.get` patched to identity)."""

    def __init__(self, value) -> None:
        self.value = value

    def remote(self, *args):
        return self.value


class _OrderRay:
    exceptions = rex

    def get(self, ref, timeout=None):
        return [r() for r in ref] if isinstance(ref, list) else ref()

    def wait(self, refs, timeout=None, num_returns=1):
        return list(refs), []


class _Buffers:
    """`SupervisedBuffer.call`, noted in `calls`; `reclaim` answers `reclaimed`."""

    def __init__(self, calls: list[str], reclaimed: dict[str, int] | None = None) -> None:
        self.calls, self.reclaimed = calls, reclaimed or {"credits": 0, "episodes": 0}

    def call(self, method: str, *args, timeout=None, learner_version=None):
        self.calls.append(" ".join(["buffer." + method, *map(str, args)]))
        return self.reclaimed if method == "reclaim" else None

    def seen(self, stats) -> None:
        pass


def _bare_supervisor(tmp_path, calls: list[str], num_actors: int, bound_s: float = 0.0,
                     clock=None, reclaimed: dict[str, int] | None = None) -> Supervisor:
    """A Supervisor with `num_actors` recorded actor handles, no processes."""
    from agent_r1_async.run.processes.supervisor import Liveness

    sup = Supervisor.__new__(Supervisor)
    sup.ray = _OrderRay()
    sup.cfg = types.SimpleNamespace(actors=types.SimpleNamespace(max_restarts=3))
    sup.actors = [_Handle(f"actor-{i}", calls, {}) for i in range(num_actors)]
    sup.runs, sup.restarts, sup.replacing, sup.discarded = {}, [0] * num_actors, {}, {}
    sup.liveness = Liveness(bound_s, clock) if clock is not None else Liveness(bound_s)
    sup.buffers, sup.last_version, sup.run_dir = _Buffers(calls, reclaimed), 14, tmp_path
    sup.endpoints = {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://w"}
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, num_actors, 1000)
    sup.nodes = NodeWatch(lambda: [])
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
    sup.ray = _OrderRay()
    sup.actors = [_Handle("actor-0", calls, {})]
    sup.runs = {}
    sup.learner = _Learner()
    sup.buffers = types.SimpleNamespace(handle=_Handle("buffer", calls, {}))
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


def test_a_buffer_that_keeps_dying_ends_the_launch_after_max_restarts(tmp_path):
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.processes.buffer_group import SupervisedBuffer

    buffers = SupervisedBuffer.__new__(SupervisedBuffer)  # no processes: the count only
    buffers.cfg = config_from_dict({"buffer": {"max_restarts": 0}})
    buffers.restarts = 0
    buffers.run_dir = tmp_path
    buffers._node, buffers.where = None, {}  # placed nowhere known: a process death, not a node's
    log = tmp_path / "logs" / "buffer.log"
    with pytest.raises(RuntimeError, match=r"^buffer process died: killed by a signal \(SIGKILL: "
                       r"`kill -9`, the kernel's OOM killer or a crash\); log: "
                       + re.escape(str(log)) + r"; restarted 0 times \(buffer\.max_restarts\)$"):
        buffers.restart(_Died(_SIGKILLED), learner_version=3)
    with pytest.raises(Exception, match=r"buffer\.max_restarts: must be >= 0"):
        config_from_dict({"buffer": {"max_restarts": -1}})


def test_every_buffer_host_gets_the_record_bounds_derived_once(monkeypatch, tmp_path):
    """The launch derives the buffer's `RecordBounds` once (model.max_model_len, env.max_turns,
    algorithm.group_size, actors.num_actors, the policy's config.json vocab_size) and hands the
    same object to the first BufferHost and to each restarted one, as the host's `bounds`."""
    import inspect
    import json

    import ray

    from agent_r1_async.buffers.validate import RecordBounds
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.processes.buffer_group import SupervisedBuffer
    from agent_r1_async.run.processes.hosts import BufferHost

    started: list[tuple[tuple, dict]] = []

    class _HostClass:
        def options(self, **options):
            return self

        def remote(self, *args, **kwargs):
            started.append((args, kwargs))
            bound = {"data": "tcp://127.0.0.1:1", "control": "tcp://127.0.0.1:2"}
            where = {"node_id": "ab" * 28, "ip": "127.0.0.1"}  # Ray's node id: 28 bytes in hex
            return types.SimpleNamespace(endpoints=_Call(bound), placement=_Call((bound, where)),
                                         serve=_Call("watch"))

    monkeypatch.setattr(ray, "remote", lambda **kw: lambda cls: _HostClass())
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref)
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text(json.dumps({"vocab_size": 777}))
    cfg = config_from_dict({"model": {"name_or_path": str(tmp_path / "policy"),
                                      "max_model_len": 512},
                            "env": {"max_turns": 3}, "algorithm": {"group_size": 6},
                            "actors": {"num_actors": 5}})
    buffers = SupervisedBuffer(cfg, tmp_path, None, resume=False)
    buffers._start(relaunch=False)  # what a restart does
    assert len(started) == 2
    for args, kwargs in started:
        bound = inspect.signature(BufferHost).bind(*args, **kwargs).arguments
        assert bound["bounds"] is buffers.bounds
    assert buffers.bounds == RecordBounds(vocab_size=777, max_model_len=512, max_steps=3,
                                          max_group_size=6, max_actors=5)


def test_an_actor_restarted_by_ray_gets_the_current_endpoints_before_its_loop_reruns(
        capsys, tmp_path):
    """Ray re-runs a restarted actor's constructor with launch-time endpoints; after a learner
    restart the weights are published elsewhere (the kill drill's actor-0 served v0 forever)."""
    calls: list[str] = []
    dead_run = _Handle("actor-0", [], {"run": _Died(_SIGKILLED)}).run.remote()
    sup = _bare_supervisor(tmp_path, calls, 1)
    sup.runs = {dead_run: 0}
    sup.endpoints = {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://new-learner"}
    sup.check_actors()
    # What the dead process held in the buffer comes back before the new loop runs.
    assert calls == ["buffer.reclaim actor-0", "actor-0.pid", "actor-0.set_endpoints",
                     "actor-0.where", "actor-0.run"]
    assert sup.actors[0].args["set_endpoints"] == (sup.endpoints,)
    assert sup.restarts == [1] and list(sup.runs.values()) == [0]
    assert capsys.readouterr().out.splitlines() == [
        "[launch] actor-0 died: killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer "
        f"or a crash); log: {tmp_path}/logs/actor-0.log",
        "[launch] actor-0 restarted by Ray (1 of 3 restarts); its loop runs again; discarded in "
        "flight: no episode"]


def test_a_learner_restart_first_restarts_a_buffer_the_memory_monitor_took_too(
        monkeypatch, tmp_path, capsys):
    """Ray's memory monitor killed the buffer, the learner and both actors at once in a drill
    run; the new learner's handshake then waited on the dead buffer. The buffer comes first."""
    from agent_r1_async.run.processes import supervisor as sup_mod

    calls: list[str] = []

    class _Group:
        def __init__(self, *args, **kwargs) -> None:
            calls.append("learner.start")
            self.leader = _Handle("learner", calls, {})
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

    class _Ray(_OrderRay):
        def get(self, ref, timeout=None):
            out = super().get(ref, timeout)
            return 6 if out == "learner.version" else out

    monkeypatch.setattr(sup_mod, "LearnerGroup", _Group)
    (tmp_path / "checkpoints" / "step-6").mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").symlink_to("step-6")
    sup = Supervisor.__new__(Supervisor)
    sup.ray, sup.run_dir, sup.curve = _Ray(), tmp_path, None
    sup.cfg = types.SimpleNamespace(learner=types.SimpleNamespace(max_restarts=3, world_size=1))
    sup.learner, sup.buffers, sup.actors, sup.runs = _Group(), _Buffers(), [], {}
    sup.replacing, sup.discarded = {}, {}
    sup.endpoints, sup.learner_restarts, sup.last_version = {"control": "tcp://c"}, 0, 7
    sup.nodes = NodeWatch(lambda: [])
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, 1, 1000)
    calls.clear()
    sup.restart_learner(0, rex.OutOfMemoryError(_OOM))
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
    first, second = _Died(_SIGKILLED), rex.OutOfMemoryError(_OOM)
    tries: list[tuple[int, BaseException]] = []

    def restart(rank: int, error: BaseException) -> None:
        tries.append((rank, error))
        if len(tries) == 1:
            raise second

    sup = _supervisor({})
    sup.restart_learner = restart
    sup._restart_until_up(1, first)
    assert tries == [(1, first), (0, second)]


def test_a_learner_group_that_never_comes_up_ends_the_launch_at_max_restarts(monkeypatch):
    from agent_r1_async.run.processes import supervisor as sup_mod

    class _Group:
        def __init__(self, *args, **kwargs) -> None:
            raise rex.OutOfMemoryError(_OOM)

        def kill(self) -> None:
            pass

    class _Buffers:
        def ensure_alive(self, version: int) -> None:
            pass

    monkeypatch.setattr(sup_mod, "LearnerGroup", _Group)
    sup = _supervisor({})
    sup.run_dir, sup.curve, sup.buffers = "/nonexistent", None, _Buffers()
    sup.learner, sup.learner_restarts, sup.last_version = _Group.__new__(_Group), 0, 3
    sup.cfg = types.SimpleNamespace(learner=types.SimpleNamespace(max_restarts=3, world_size=1))
    sup.endpoints = {"control": "tcp://c"}
    with pytest.raises(RuntimeError, match="restarted 3 times"):
        sup._restart_until_up(0, _Died(_SIGKILLED))
    assert sup.learner_restarts == 4  # three tries that died starting, the fourth refused


def test_liveness_names_a_silent_role_once_and_says_when_it_answers_again():
    from agent_r1_async.run.processes.supervisor import Liveness
    from tests.fakes.clock import FakeClock

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


class _Pending:
    """A Ray reference that is ready once `ready` is set."""

    def __init__(self, value, ready: bool) -> None:
        self.value, self.ready = value, ready


class _ProbeRay(_OrderRay):
    def wait(self, refs, timeout=None, num_returns=1):
        done = [r for r in refs if not isinstance(r, _Pending) or r.ready]
        return done, [r for r in refs if r not in done]

    def get(self, ref, timeout=None):
        return ref.value if isinstance(ref, _Pending) else super().get(ref, timeout)


def test_a_frozen_buffer_or_learner_is_named_after_the_bound_and_when_it_answers(
        tmp_path, capsys):
    """A buffer or learner frozen for 90 s (SIGSTOP) came back 0.5 s after SIGCONT, with no
    console line meanwhile. Each is named once after launch.unresponsive_s (30 s here) and
    again when it answers; neither is killed (the supervisor's docstring says why)."""
    from agent_r1_async.run.processes.supervisor import _Probe
    from tests.fakes.clock import FakeClock

    clock = FakeClock(0.0)
    calls: list[str] = []
    sup = _bare_supervisor(tmp_path, calls, 0, bound_s=30.0, clock=clock)
    sup.ray = _ProbeRay()
    frozen = {"buffer": False, "learner": False}
    stats = {"learner_version": 14, "groups_ready": 1, "in_flight_groups": 3}
    refs: dict[str, list[_Pending]] = {"buffer": [], "learner": []}

    def ask(role: str, answer: dict):
        def call() -> _Pending:
            refs[role].append(_Pending(answer, not frozen[role]))
            return refs[role][-1]
        return call

    sup._buffer_probe = _Probe(sup.ray, ask("buffer", stats), 2.0, clock)
    sup._last_stats = {}
    learner = [_Probe(sup.ray, ask("learner", {"doing": "an update", "for_s": 4.0}), 2.0, clock)]
    sup._learner_seen = {}
    assert sup.poll_buffer() == stats  # t = 0: answered at once
    sup._watch_learner(learner)
    frozen.update(buffer=True, learner=True)
    for t in (2.0, 31.0):  # a request goes out at t = 2 and stays unanswered
        clock.t = t
        assert sup.poll_buffer() is None
        sup._watch_learner(learner)
    assert capsys.readouterr().out == ""  # 29 s: not yet
    clock.t = 32.0
    sup.poll_buffer()
    sup._watch_learner(learner)
    clock.t = 60.0
    sup.poll_buffer()
    sup._watch_learner(learner)
    refs["learner"][-1].ready = True  # SIGCONT the learner at t = 72
    clock.t = 72.0
    sup._watch_learner(learner)
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


def test_an_unresponsive_actor_is_reclaimed_then_killed_and_its_loop_rerun(tmp_path, capsys):
    """A SIGSTOPped actor kept its credits and the healthy actor got none: 0 updates in 180 s.
    Past the bound the buffer takes its credits back, its process is killed through Ray, and
    the launcher's death path re-runs the loop of the process Ray starts instead."""
    from tests.fakes.clock import FakeClock

    clock = FakeClock(0.0)
    calls: list[str] = []
    # The buffer's answer: 3 credits, 2 unfinished episodes of 3 and 14 steps discarded.
    sup = _bare_supervisor(tmp_path, calls, 2, bound_s=30.0, clock=clock,
                           reclaimed={"credits": 3, "episodes": 2, "discarded": 2, "steps": 17,
                                      "tokens": 1234, "le_4": 1, "le_16": 1})
    sup.ray.kill = lambda handle, no_restart: calls.append(f"kill {handle.name} {no_restart}")
    stats = {"actor_silence_s": {"actor-0": 0.5, "actor-1": 29.9},
             "actor_credits": {"actor-1": 3},
             "actors": {"actor-1": {"policy_version": 14, "episodes_in_flight": 2}}}
    sup.watch_actors(stats)
    assert calls == []
    stats["actor_silence_s"]["actor-1"] = 31.0
    sup.watch_actors(stats)
    assert calls == ["buffer.reclaim actor-1", "kill actor-1 False"]
    stats["actor_silence_s"]["actor-1"] = 60.0
    sup.watch_actors(stats)  # being replaced: not judged again
    assert len(calls) == 2

    # Ray restarts the process; the old one's loop call fails: the death path re-runs it,
    # after a reclaim that finds nothing left; its restart line says what the first discarded.
    sup.buffers.reclaimed = {"credits": 0, "episodes": 0, "discarded": 0, "steps": 0,
                             "tokens": 0}
    sup.runs = {_Handle("actor-1", [], {"run": _Died(_SIGKILLED)}).run.remote(): 1}
    sup.check_actors()
    assert calls[2:] == ["buffer.reclaim actor-1", "actor-1.pid", "actor-1.set_endpoints",
                         "actor-1.where", "actor-1.run"]
    assert sup.restarts == [0, 1] and sup.replacing == {}
    sup.watch_actors({"actor_silence_s": {"actor-0": 0.2}})  # the new one has not reported
    sup.watch_actors({"actor_silence_s": {"actor-0": 0.2, "actor-1": 2.0}})
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
    assert sup.discarded == {}
    stats["actor_silence_s"]["actor-1"] = 30.0  # hung again: named and replaced again
    sup.watch_actors(stats)
    assert calls[7:] == ["buffer.reclaim actor-1", "kill actor-1 False"]


def test_a_buffer_whose_node_is_lost_restarts_elsewhere_with_new_endpoints(
        monkeypatch, tmp_path, capsys):
    """Its old endpoints went with the node: the new buffer is placed by buffer.resources
    alone (no node affinity, no old ports), `moved` says the clients must follow, and the line
    counts what the old one had received after its snapshot."""
    import ray

    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.processes.buffer_group import SupervisedBuffer

    started: list[tuple[dict, dict]] = []
    nodes = {"n2": "127.0.0.2", "n3": "127.0.0.3"}

    class _HostClass:
        def options(self, **options):
            self.options_ = options
            return self

        def remote(self, *args, **kwargs):
            node = "n2" if not started else "n3"
            started.append((self.options_, kwargs))
            bound = {"data": f"tcp://{nodes[node]}:1{len(started)}",
                     "control": f"tcp://{nodes[node]}:2{len(started)}"}
            return types.SimpleNamespace(
                endpoints=_Call(bound), serve=_Call("watch"),
                placement=_Call((bound, {"node_id": node, "ip": nodes[node]})),
                restored=_Call({"version": 4, "groups": 3, "records": 120, "note": ""}),
                set_version=_Call(None))

    alive = {"n2": True, "n3": True}
    monkeypatch.setattr(ray, "remote", lambda **kw: lambda cls: _HostClass())
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref)
    monkeypatch.setattr(ray, "kill", lambda handle, no_restart: None)
    monkeypatch.setattr(ray, "nodes", lambda: [
        {"NodeID": n, "NodeManagerAddress": ip, "Alive": alive[n]} for n, ip in nodes.items()])
    cfg = config_from_dict({"buffer": {"resources": {"buffer": 1}}})
    buffers = SupervisedBuffer(cfg, tmp_path, None, resume=False)
    assert buffers.endpoints["control"] == "tcp://127.0.0.2:21" and not buffers.moved
    # At the launcher's last look, 2 episodes (5 and 20 steps) had records since the snapshot.
    buffers.seen({"records": 157, "drops": {
        "stale": 4, "length/generated/le_8": 3, "length/unsaved/discarded": 2,
        "length/unsaved/steps": 25, "length/unsaved/tokens": 2500,
        "length/unsaved/le_8": 1, "length/unsaved/le_32": 1}})
    alive["n2"] = False
    buffers.restart(_Died(_SIGKILLED), learner_version=6)
    (first, _), (second, kwargs) = started
    assert first == second == {"resources": {"buffer": 1}}  # no affinity to the lost node
    assert kwargs["bind"] is None  # new ports on the new node
    assert buffers.moved and buffers.endpoints["control"] == "tcp://127.0.0.3:22"
    assert buffers.where == {"node_id": "n3", "ip": "127.0.0.3"}
    assert capsys.readouterr().err == (
        "[launch] buffer lost with its node 127.0.0.2; restarted from its snapshot of version 4 "
        "(3 groups ready) on node 127.0.0.3 with new endpoints, buffer now at version 6; lost "
        "with it: 37 records received after the snapshot; discarded in flight: 2 episodes (25 "
        "steps: 1 of <=8, 1 of <=32; 2,500 generated tokens) with a record since (at least: "
        "counted at the launcher's last look) (1/3)\n")


def test_after_the_buffer_moved_the_learner_and_the_actors_follow_it(tmp_path):
    calls: list[str] = []
    sup = _bare_supervisor(tmp_path, calls, 2)
    sup.buffers.moved = True
    sup.buffers.endpoints = {"data": "tcp://new:1", "control": "tcp://new:2"}
    sup.buffers.where = {"node_id": "n3", "ip": "127.0.0.3"}
    sup.learner = types.SimpleNamespace(ranks=[_Handle("learner", calls, {})])
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
    from agent_r1_async.run.processes.supervisor import EnvFailing

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

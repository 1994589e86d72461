"""Supervision decisions that need no running Ray: which learner failures are deaths (and
restart the group), what the one restart line says, and a full disk behind Ray's task error."""

from __future__ import annotations

import re
import types

import pytest
import ray.exceptions as rex

from agent_r1_async.learner.checkpoint_files import DiskFullError, disk_full_message
from agent_r1_async.run.launch import lost_final_checkpoint
from agent_r1_async.run.output.console import Console
from agent_r1_async.run.output.events import Events, death_cause
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
            return f"{self.name}.{method}"

        def remote(*args):
            self.calls.append(f"{self.name}.{method}")
            self.args[method] = args
            return run
        return types.SimpleNamespace(remote=remote)


class _OrderRay:
    exceptions = rex

    def get(self, ref, timeout=None):
        return [r() for r in ref] if isinstance(ref, list) else ref()

    def wait(self, refs, timeout=None, num_returns=1):
        return list(refs), []


def test_the_final_snapshot_is_written_before_the_final_checkpoint(capsys, tmp_path):
    """A final checkpoint that finds the disk full cannot cost the buffer's state: the buffer
    snapshots first; the checkpoint's failure is one line saying the disk is full."""
    calls: list[str] = []
    full = DiskFullError("disk full: checkpoint step-9 could not be written under /r")

    class _Learner:
        def call(self, method):
            calls.append(f"learner.{method}")
            if method == "save_checkpoint":
                raise rex.RayTaskError("save_checkpoint", "Traceback ...", full)

        def kill(self):
            calls.append("learner.kill")

    sup = Supervisor.__new__(Supervisor)
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

    class _Call:
        def __init__(self, value):
            self.value = value

        def remote(self, *args):
            return self.value

    started: list[tuple[tuple, dict]] = []

    class _HostClass:
        def options(self, **options):
            return self

        def remote(self, *args, **kwargs):
            started.append((args, kwargs))
            bound = {"data": "tcp://127.0.0.1:1", "control": "tcp://127.0.0.1:2"}
            node = "ab" * 28  # a node id as Ray spells it (28 bytes in hex)
            return types.SimpleNamespace(endpoints=_Call(bound), placement=_Call((bound, node)),
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
    sup = Supervisor.__new__(Supervisor)
    sup.ray = _OrderRay()
    sup.cfg = types.SimpleNamespace(actors=types.SimpleNamespace(max_restarts=3))
    sup.actors = [_Handle("actor-0", calls, {})]
    sup.runs, sup.restarts = {dead_run: 0}, [0]
    sup.endpoints = {"data": "tcp://d", "control": "tcp://c", "weights": "tcp://new-learner"}
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, 1, 1000)
    sup.check_actors()
    assert calls == ["actor-0.pid", "actor-0.set_endpoints", "actor-0.run"]
    assert sup.actors[0].args["set_endpoints"] == (sup.endpoints,)
    assert sup.restarts == [1] and list(sup.runs.values()) == [0]
    assert capsys.readouterr().out.splitlines() == [
        "[launch] actor-0 died: killed by a signal (SIGKILL: `kill -9`, the kernel's OOM killer "
        f"or a crash); log: {tmp_path}/logs/actor-0.log",
        "[launch] actor-0 restarted by Ray (1 of 3 restarts); its loop runs again"]


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

        def call(self, method: str) -> None:
            calls.append(f"learner.{method}")

        def kill(self) -> None:
            calls.append("learner.kill")

    class _Buffers:
        def ensure_alive(self, version: int) -> None:
            calls.append(f"buffer.ensure_alive(v{version})")

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
    sup.endpoints, sup.learner_restarts, sup.last_version = {"control": "tcp://c"}, 0, 7
    sup.events = Events(Console(tmp_path / "logs", live=False), tmp_path, 1, 1000)
    calls.clear()
    sup.restart_learner(0, rex.OutOfMemoryError(_OOM))
    assert calls == ["learner.kill", "buffer.ensure_alive(v7)", "learner.start",
                     "learner.version", "learner.weights_endpoint", "learner.publish"]
    line = capsys.readouterr().out
    assert line == ("[launch] learner rank 0 failed: out of memory (Ray's memory monitor killed "
                    f"it, node memory 22.5GB of 23.4GB); log: {tmp_path}/logs/learner-0.log; "
                    "restarting the learner group (1 ranks) from "
                    f"{tmp_path}/checkpoints/step-6 (version 6; updates 7..7 are redone, not "
                    "logged again) (1 of 3 restarts)\n")


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

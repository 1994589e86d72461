"""The buffer's supervision (run/processes/buffer_group.py) without Ray: the restart count,
the record bounds every host gets, a restart on another node when the buffer's node is lost."""

from __future__ import annotations

import re
import types

import pytest

from agent_r1_async.run.processes.buffer_group import BufferHost, SupervisedBuffer
from tests.unit.run.processes.ray_fakes import SIGKILLED, Call, died


def test_a_buffer_that_keeps_dying_ends_the_launch_after_max_restarts(tmp_path):
    from agent_r1_async.config import config_from_dict

    buffers = SupervisedBuffer.__new__(SupervisedBuffer)  # no processes: the count only
    buffers.cfg = config_from_dict({"buffer": {"max_restarts": 0}})
    buffers.restarts = 0
    buffers.run_dir = tmp_path
    buffers._node, buffers.where = None, {}  # placed nowhere known: a process death, not a node's
    log = tmp_path / "logs" / "buffer.log"
    with pytest.raises(RuntimeError, match=r"^buffer process died: killed by a signal \(SIGKILL: "
                       r"`kill -9`, the kernel's OOM killer or a crash\); log: "
                       + re.escape(str(log)) + r"; restarted 0 times \(buffer\.max_restarts\)$"):
        buffers.restart(died(SIGKILLED), learner_version=3)
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

    started: list[tuple[tuple, dict]] = []

    class _HostClass:
        def options(self, **options):
            return self

        def remote(self, *args, **kwargs):
            started.append((args, kwargs))
            bound = {"data": "tcp://127.0.0.1:1", "control": "tcp://127.0.0.1:2"}
            where = {"node_id": "ab" * 28, "ip": "127.0.0.1"}  # Ray's node id: 28 bytes in hex
            return types.SimpleNamespace(endpoints=Call(bound), placement=Call((bound, where)),
                                         serve=Call("watch"))

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


def test_a_buffer_whose_node_is_lost_restarts_elsewhere_with_new_endpoints(
        monkeypatch, tmp_path, capsys):
    """Its old endpoints went with the node: the new buffer is placed by buffer.resources
    alone (no node affinity, no old ports), `moved` says the clients must follow, and the line
    counts what the old one had received after its snapshot."""
    import ray

    from agent_r1_async.config import config_from_dict

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
                endpoints=Call(bound), serve=Call("watch"),
                placement=Call((bound, {"node_id": node, "ip": nodes[node]})),
                restored=Call({"version": 4, "groups": 3, "records": 120, "note": ""}),
                set_version=Call(None))

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
    buffers.restart(died(SIGKILLED), learner_version=6)
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

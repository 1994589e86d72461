"""Which node runs which process, and which nodes are lost (run/processes/nodes.py); a
process's own node address."""

from __future__ import annotations

from agent_r1_async.run.processes.nodes import NodeWatch, alive_nodes, placement_line
from tests.fakes.clock import FakeClock


def _node(node_id: str, ip: str, alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Alive": alive}


def _at(node_id: str, ip: str) -> dict[str, str]:
    return {"node_id": node_id, "ip": ip}


def test_alive_nodes_keeps_only_the_live_ones():
    table = [_node("a", "127.0.0.2"), _node("b", "127.0.0.3", alive=False)]
    assert alive_nodes(table) == {"a": "127.0.0.2"}


def test_the_placement_line_groups_processes_by_node_in_start_order():
    where = {"buffer": _at("a", "127.0.0.2"), "learner": _at("b", "127.0.0.3"),
             "actor-0": _at("c", "127.0.0.4"), "actor-1": _at("b", "127.0.0.3")}
    assert placement_line(where) == (
        "buffer on 127.0.0.2; learner, actor-1 on 127.0.0.3; actor-0 on 127.0.0.4")


def test_a_lost_node_is_named_once_with_every_process_that_ran_there():
    """actor-1 was restarted elsewhere before Ray marked its node dead: it still ran there."""
    clock = FakeClock(0.0)
    table = [_node("a", "127.0.0.2"), _node("b", "127.0.0.3"), _node("c", "127.0.0.4")]
    watch = NodeWatch(lambda: table, every_s=2.0, clock=clock)
    watch.place("buffer", _at("a", "127.0.0.2"))
    watch.place("learner", _at("b", "127.0.0.3"))
    watch.place("actor-1", _at("b", "127.0.0.3"))
    watch.place("actor-0", _at("c", "127.0.0.4"))
    table[1] = _node("b", "127.0.0.3", alive=False)
    watch.place("actor-1", _at("c", "127.0.0.4"))  # re-placed by Ray
    clock.t = 1.0
    assert watch.lost() == []  # not time for a look yet
    clock.t = 2.0
    assert watch.lost() == [("127.0.0.3", ["learner", "actor-1"])]
    clock.t = 4.0
    assert watch.lost() == []  # said once
    assert watch.where["actor-1"] == _at("c", "127.0.0.4")
    table[2] = _node("c", "127.0.0.4", alive=False)
    clock.t = 6.0
    assert watch.lost() == [("127.0.0.4", ["actor-0", "actor-1"])]


def test_a_node_with_none_of_the_runs_processes_is_named_with_none():
    clock = FakeClock(0.0)
    table = [_node("a", "127.0.0.2"), _node("b", "127.0.0.3")]
    watch = NodeWatch(lambda: table, every_s=2.0, clock=clock)
    watch.place("buffer", _at("a", "127.0.0.2"))
    table.pop()
    clock.t = 2.0
    assert watch.lost() == [("127.0.0.3", [])]


def test_bind_host_node_becomes_this_nodes_address_and_others_stay(monkeypatch):
    """`launch.bind_host: node`: each process binds its own Ray node's address, so a buffer
    on 127.0.0.3 binds there (the multi-node tests run it on a loopback cluster)."""
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.processes import nodes

    monkeypatch.setattr(nodes, "node_ip", lambda: "127.0.0.3")
    cfg = config_from_dict({"launch": {"bind_host": "node"}})
    resolved = nodes.on_this_node(cfg)
    assert resolved.launch.bind_host == "127.0.0.3" and cfg.launch.bind_host == "node"
    assert resolved.buffer == cfg.buffer and resolved.launch.curve
    plain = config_from_dict({"launch": {"bind_host": "127.0.0.1"}})
    assert nodes.on_this_node(plain) is plain

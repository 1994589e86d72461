"""The process hosts' own logic, without Ray: what a learner rank tells the launcher's
liveness watch about its worker thread."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from agent_r1_async.run.processes.hosts import LearnerHost


def test_a_learner_rank_says_what_its_worker_runs_while_it_runs():
    """The launcher asks `progress()` on Ray's second thread while an update holds the
    worker: it answers at once, naming the update (a long update is alive, not hung)."""
    host = LearnerHost.__new__(LearnerHost)  # no model, no Ray: the worker thread only
    host._worker = ThreadPoolExecutor(1)
    host._doing = ("idle", 0.0)
    inside, release = threading.Event(), threading.Event()
    seen: list[dict] = []

    def step() -> str:  # named as Learner.step is
        inside.set()
        release.wait(10)
        return "updated"

    runner = threading.Thread(target=lambda: seen.append({"result": host._on_worker(step)}))
    runner.start()
    assert inside.wait(10)
    during = host.progress()
    release.set()
    runner.join(10)
    after = host.progress()
    host._worker.shutdown()
    assert during["doing"] == "an update" and during["for_s"] >= 0.0
    assert seen == [{"result": "updated"}] and after["doing"] == "idle"


def test_bind_host_node_becomes_this_nodes_address_and_others_stay(monkeypatch):
    """`launch.bind_host: node`: each process binds its own Ray node's address, so a buffer
    on 127.0.0.3 binds there (the multi-node tests run it on a loopback cluster)."""
    from agent_r1_async.config import config_from_dict
    from agent_r1_async.run.processes import hosts

    monkeypatch.setattr(hosts, "node_ip", lambda: "127.0.0.3")
    cfg = config_from_dict({"launch": {"bind_host": "node"}})
    resolved = hosts.on_this_node(cfg)
    assert resolved.launch.bind_host == "127.0.0.3" and cfg.launch.bind_host == "node"
    assert resolved.buffer == cfg.buffer and resolved.launch.curve
    plain = config_from_dict({"launch": {"bind_host": "127.0.0.1"}})
    assert hosts.on_this_node(plain) is plain

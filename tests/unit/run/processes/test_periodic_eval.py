"""eval.every_updates: the evaluation actor (run/processes/periodic_eval.py) over real ZeroMQ weights.

A scripted engine plays the arithmetic oracle (success 1.0); a ZmqWeightSender plays the
learner. Expected versions by hand with every_updates = 2: v0 at once; v1 is applied but not
due; v2 is due; when v3 and v5 arrive together the newest (5) is applied and evaluated
(>= due 4), then the next due is 6.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from agent_r1_async.config import ConfigError, config_from_dict
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.run.processes.periodic_eval import Evaluator, next_due
from agent_r1_async.weights.zmq import ZmqWeightSender
from agent_r1_async.wire.transport import tcp_endpoint
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.engine import FakeEngine


def _cfg(**eval_keys):
    return config_from_dict({
        "model": {"name_or_path": tiny_model_dir(), "max_model_len": 1024},
        "env": {"name": "arithmetic", "max_turns": 3},
        "eval": {"every_updates": 2, "every_num_tasks": 3, **eval_keys},
    })


def _wait(cond, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_next_due():
    assert [next_due(v, 2) for v in (0, 1, 2, 5)] == [2, 2, 4, 6]
    assert next_due(7, 5) == 10


def test_evaluates_due_versions_of_the_published_weights():
    cfg = _cfg()
    spec = get_env_spec(cfg.env)
    oracles = {t.prompt: spec.oracle(t) for t in spec.tasks("dev")[:3]}
    engine = FakeEngine.by_turn(load_tokenizer(tiny_model_dir()), oracles)
    transport = ZmqTransport()
    pub = ZmqWeightSender(transport, tcp_endpoint())
    ev = Evaluator(cfg, transport, pub.endpoint, engine=engine)
    stop = threading.Event()
    thread = threading.Thread(target=ev.run, args=(stop,))
    thread.start()
    weights = {"w": torch.zeros(4)}
    results = []

    def publish_until_loaded(*versions):
        def loaded():
            for v in versions:  # republished until the late-joining SUB sees it; the pause
                pub.publish(v, weights)  # lets the queue drain (weights PUB high-water mark: 1)
                time.sleep(0.05)
            return engine.version == versions[-1]
        _wait(loaded)

    try:
        _wait(lambda: results.extend(ev.take_results()) or len(results) == 1)
        publish_until_loaded(1)
        time.sleep(0.3)
        assert ev.take_results() == []  # v1 is not due
        publish_until_loaded(2)
        _wait(lambda: results.extend(ev.take_results()) or len(results) == 2)
        publish_until_loaded(3, 5)
        _wait(lambda: results.extend(ev.take_results()) or len(results) == 3)
    finally:
        stop.set()
        thread.join(30)
        pub.close()
        transport.close()
    assert [r["version"] for r in results] == [0.0, 2.0, 5.0]
    assert ev.due == 6
    for r in results:  # 3 fixed dev tasks, each played by the oracle
        assert r["episodes"] == 3.0 and r["success"] == 1.0 and r["eval_time_s"] >= 0
    assert 4 not in engine.loaded  # versions are skipped, never queued


def test_config_rules():
    assert _cfg().eval.every_updates == 2
    with pytest.raises(ConfigError, match=r"eval\.every_updates"):
        config_from_dict({"eval": {"every_updates": -1}})
    with pytest.raises(ConfigError, match=r"eval\.every_updates"):  # never published
        config_from_dict({"eval": {"every_updates": 3}, "learner": {"publish_every": 2}})
    with pytest.raises(ConfigError, match=r"eval\.every_num_tasks"):
        config_from_dict({"eval": {"every_num_tasks": 0}})


def test_follows_a_restarted_learner_to_its_new_weights_socket():
    """The learner group restarts from its checkpoint at v2 and binds a new port. Before
    `retarget`, v4 from the new socket never arrives (the evaluator still listens on the old
    one); after it, the redone v2 is not applied again (engine stays at 3, no second result)
    and v4 is evaluated: results [0, 2, 4]."""
    cfg = _cfg()
    spec = get_env_spec(cfg.env)
    oracles = {t.prompt: spec.oracle(t) for t in spec.tasks("dev")[:3]}
    engine = FakeEngine.by_turn(load_tokenizer(tiny_model_dir()), oracles)
    transport = ZmqTransport()
    old, new = ZmqWeightSender(transport, tcp_endpoint()), ZmqWeightSender(transport, tcp_endpoint())
    ev = Evaluator(cfg, transport, old.endpoint, engine=engine)
    stop = threading.Event()
    thread = threading.Thread(target=ev.run, args=(stop,))
    thread.start()
    weights = {"w": torch.zeros(4)}
    results: list[dict] = []

    def publish_until(pub, version, until):
        def done():
            pub.publish(version, weights)
            time.sleep(0.05)
            return until()
        _wait(done)

    try:
        _wait(lambda: results.extend(ev.take_results()) or len(results) == 1)
        publish_until(old, 2, lambda: results.extend(ev.take_results()) or len(results) == 2)
        publish_until(old, 3, lambda: engine.version == 3)
        for _ in range(10):  # the new learner publishes; nobody listens there yet
            new.publish(4, weights)
            time.sleep(0.05)
        assert engine.version == 3
        ev.retarget(new.endpoint)
        for _ in range(10):  # the redone version 2 from the new socket
            new.publish(2, weights)
            time.sleep(0.05)
        assert engine.version == 3 and ev.take_results() == []
        publish_until(new, 4, lambda: results.extend(ev.take_results()) or len(results) == 3)
    finally:
        stop.set()
        thread.join(30)
        old.close()
        new.close()
        transport.close()
    assert [r["version"] for r in results] == [0.0, 2.0, 4.0]
    assert ev.weights_endpoint == new.endpoint
    assert 2 not in engine.loaded[engine.loaded.index(3):]  # the redone v2 was never applied

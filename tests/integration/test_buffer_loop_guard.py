"""The buffer's service thread never dies silently (real ZeroMQ, real thread).

A group closed by the periodic `tick()` with outcomes of ±1e200 would raise OverflowError
(its returns' variance); unguarded, the thread would die while the process lived, and the
learner would time out much later. Such outcomes are refused at ingest, and every part of
the loop runs under a guard that counts an exception; a part broken for good stops the
service and calls `on_fatal` (the host exits its process, which supervision sees).
"""

from __future__ import annotations

import threading
import time

import pytest

from agent_r1_async.buffers import service as service_mod
from agent_r1_async.buffers.service import BufferService
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.records import episode_records, group_records
from tests.fakes.services import granted, push_records


@pytest.fixture
def transport():
    t = ZmqTransport()
    yield t
    t.close()


def _wait_for(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_outcomes_of_1e200_closed_by_tick_leave_the_service_serving(transport) -> None:
    # group_size 3, 2 episodes sent, group_wait_s 0.3: the *tick* closes the group
    cfg = BufferConfig(spi_tolerance=100.0, snapshot_interval_s=0.0, group_wait_s=0.3,
                       min_group_episodes=2)
    service = BufferService(cfg, AlgorithmConfig(group_size=3, batch_groups=1), transport)
    service.start()
    learner = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=5.0)
    try:
        assert learner.connect().ok
        huge_g, honest_g = granted(transport, service.control_endpoint, 2)
        huge = [r for j, x in enumerate((1e200, -1e200))
                for r in episode_records(f"h{j}", huge_g, reward=x, group_size=3)]
        push_records(transport, service.data_endpoint, huge)
        _wait_for(lambda: service.metrics().drops.get("invalid_record/reward", 0) == 2)
        time.sleep(0.6)  # two group_wait_s: the tick that would raise unguarded has run
        assert service.alive()
        push_records(transport, service.data_endpoint, group_records(honest_g, [0.0, 1.0, 1.0]))
        batch = learner.sample(1, 0, timeout_s=5.0)
        assert batch.ready and [g.group_id for g in batch.groups] == [honest_g]
        drops = service.metrics().drops
        assert not any(k.startswith("loop_error/") for k in drops), drops
    finally:
        learner.close()
        service.stop()


def test_a_failing_loop_part_is_counted_then_fatal(transport, monkeypatch) -> None:
    """An exception no check foresaw (here: tick() raising) is counted and the service keeps
    answering; when the part keeps failing, the loop stops and `on_fatal` is called."""
    monkeypatch.setattr(service_mod, "_MAX_CONSECUTIVE_ERRORS", 5)
    fatal: list[BaseException] = []
    called = threading.Event()

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        called.set()

    cfg = BufferConfig(spi_tolerance=100.0, snapshot_interval_s=0.0)
    service = BufferService(cfg, AlgorithmConfig(group_size=2, batch_groups=1), transport,
                            on_fatal=on_fatal)
    ticks = {"n": 0}

    def bad_tick() -> None:
        ticks["n"] += 1
        if ticks["n"] <= 2 or ticks["n"] >= 4:  # fails, fails, works, then fails for good
            raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(service.buffer, "tick", bad_tick)
    service.start()
    client = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=5.0)
    try:
        assert client.connect().ok
        _wait_for(lambda: ticks["n"] >= 3)
        stats = client.stats()  # still answering between failures
        assert stats.drops.get("loop_error/tick", 0) >= 2
        assert called.wait(10.0)  # ticks 4..8 fail in a row: broken for good
        assert isinstance(fatal[0], OverflowError) and service.failure is fatal[0]
        assert ticks["n"] == 8  # 2 failures, 1 success (the count restarts), 5 failures
        _wait_for(lambda: not service.alive())
        assert service.buffer.drops["loop_error/tick"] == 7
    finally:
        client.close()
        service.stop()

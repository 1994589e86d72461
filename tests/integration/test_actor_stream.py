"""A real actor (thread) with the tiny model and the transformers engine streams over ZeroMQ.

Checks: records decode, step indices are contiguous, every episode has exactly one end
record, and versions change after a weight update is published mid-run.
"""

from __future__ import annotations

import threading
import time
from typing import ClassVar

from agent_r1_async.actors.actor import Actor, shard_tasks
from agent_r1_async.config import RunConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.models import load_causal_lm, tiny_model_dir
from agent_r1_async.weights.zmq import ZmqWeightSender
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.checks import Stream
from tests.fakes.services import actor_config, buffer_service


def stream_with_weight_update(
    cfg: RunConfig, max_groups: int, timeout_s: float, engine=None, new_version: int = 1
) -> Stream:
    """Run an actor in a thread; publish `new_version` after the first step records arrive.

    Credits come from the real buffer service; the records go to the test's own sink (so
    the buffer never sees a group complete: its staleness budget must cover `max_groups`).
    """
    transport = ZmqTransport()
    sink = transport.puller("tcp://127.0.0.1:0")
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    sender = ZmqWeightSender(transport)
    actor = Actor(
        cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint, sender.endpoint,
        engine,
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            actor.run(max_groups=max_groups)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    stream = Stream()
    published_at = None
    new_weights = {k: v * 1.25 for k, v in load_causal_lm(tiny_model_dir()).state_dict().items()}
    try:
        thread.start()
        deadline = time.monotonic() + timeout_s
        while True:
            assert time.monotonic() < deadline, "actor did not finish in time"
            frames = sink.recv(200)
            if frames is None:
                if not thread.is_alive():
                    break  # its pusher lingered until everything was delivered
                continue
            stream.add(frames)
            if published_at is None and len(stream.arrival) >= 2:
                published_at = time.time()
                sender.publish(new_version, new_weights)
        thread.join(timeout=30)
    finally:
        sink.close()
        granted = credits.metrics().in_flight_groups  # granted, never completed here
        credits.stop()
        sender.close()
        transport.close()
    assert not errors, errors
    assert published_at is not None, "no step record arrived before the actor finished"
    assert actor.groups_started == max_groups and granted >= max_groups
    stream.published_at = published_at
    return stream


def check_versions(stream: Stream, old: int = 0, new: int = 1) -> None:
    versions = [s.policy_version for _, s in stream.arrival]
    assert versions[0] == old and versions[-1] == new, versions
    for t, s in stream.arrival:
        assert s.policy_version in (old, new) and set(s.token_versions) <= {old, new}
        if s.policy_version == new or new in s.token_versions:
            # Tokens of the new version exist only after it was published.
            assert stream.published_at is not None and t >= stream.published_at
        if s.token_versions:  # an action spanning the update: old tokens first, then new
            assert s.token_versions == sorted(s.token_versions)
    assert stream.stats and stream.stats[-1].policy_version == new
    assert stream.stats[-1].weight_sync_latency_s > 0


def test_hf_actor_streams_records_and_picks_up_new_weights():
    cfg = actor_config("hf")
    stream = stream_with_weight_update(cfg, max_groups=6, timeout_s=120)
    stream.check(cfg.algorithm.group_size)
    assert len(stream.ends) == 6 * 2
    check_versions(stream)
    # The HF engine swaps weights between batches: every action has exactly one version.
    assert all(not s.token_versions for _, s in stream.arrival)
    last = stream.stats[-1]
    assert last.episodes_done + last.episodes_failed == 12 and last.tokens_per_s > 0


def test_task_sharding_is_disjoint_and_covers_the_split():
    tasks = [Task(str(i), f"q{i}") for i in range(10)]
    seen = []
    for i in range(3):
        it = shard_tasks(tasks, i, 3, seed=i)
        mine = [next(it).task_id for _ in range(len(range(i, 10, 3)))]
        assert sorted(mine, key=int) == [str(j) for j in range(i, 10, 3)]  # one pass = my shard
        seen += mine
    assert sorted(seen, key=int) == [str(j) for j in range(10)]


class _GrantRecordingClient(BufferClient):
    """The real client, noting the group ids of every grant."""

    granted: ClassVar[list[str]] = []

    def request_credits(self, max_groups: int, held=None):
        grant = super().request_credits(max_groups, held)
        _GrantRecordingClient.granted.extend(grant.group_ids)
        return grant


def test_actor_feeds_the_real_buffer_service(monkeypatch):
    """Credits and data through the real BufferService: every group arrives complete, under
    exactly the group ids the buffer minted in its grants (the buffer is their one owner)."""
    from agent_r1_async.actors import actor as actor_module

    monkeypatch.setattr(actor_module, "BufferClient", _GrantRecordingClient)
    _GrantRecordingClient.granted = []
    cfg = actor_config("hf")
    transport = ZmqTransport()
    service = buffer_service(transport, algo=cfg.algorithm, start=True)
    try:
        actor = Actor(cfg, "actor-0", transport, service.data_endpoint, service.control_endpoint, None)
        actor.run(max_groups=3)
        deadline = time.monotonic() + 10
        while service.metrics().groups_ready < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = service.metrics()
    finally:
        service.stop()
        transport.close()
    assert stats.groups_ready == 3 and stats.episodes_stored == 3 * cfg.algorithm.group_size
    assert stats.drops.get("malformed", 0) == 0
    batch, _ = service.buffer.try_sample(3, 0)
    assert batch is not None
    granted = _GrantRecordingClient.granted
    assert len(granted) == 3 and len(set(granted)) == 3
    stored = sorted(g.group_id for g in batch.groups)
    assert stored == sorted(granted)
    assert {s.group_id for g in batch.groups for e in g.episodes for s in e.steps} == set(granted)
    assert service.buffer.admission.unbudgeted == 0

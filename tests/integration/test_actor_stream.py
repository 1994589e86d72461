"""A real actor (thread) with the tiny model and the transformers engine streams over ZeroMQ.

Checks: records decode, step indices are contiguous, every episode has exactly one end
record, and versions change after a weight update is published mid-run.
"""

from __future__ import annotations

import threading
import time

from fakes_actors import CreditServer, Stream, actor_config

from agent_r1_async import messages as m
from agent_r1_async.actors.actor import Actor, shard_tasks
from agent_r1_async.config import RunConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.learner.weights import WeightPublisher
from agent_r1_async.models import load_causal_lm, tiny_model_dir
from agent_r1_async.transport import ZmqTransport


def stream_with_weight_update(cfg: RunConfig, max_groups: int, timeout_s: float) -> Stream:
    """Run an actor in a thread; publish v1 after the first step records arrive."""
    transport = ZmqTransport()
    sink = transport.puller("tcp://127.0.0.1:0")
    credits = CreditServer(transport)
    publisher = WeightPublisher(transport)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.endpoint, publisher.endpoint)
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
            msg = stream.add(frames[0])
            if published_at is None and isinstance(msg, m.StepRecord) and len(stream.arrival) >= 2:
                published_at = time.time()
                publisher.publish(1, new_weights)
        thread.join(timeout=30)
    finally:
        sink.close()
        credits.close()
        publisher.close()
        transport.close()
    assert not errors, errors
    assert published_at is not None, "no step record arrived before the actor finished"
    assert actor.groups_started == max_groups and credits.granted >= max_groups
    stream.published_at = published_at  # type: ignore[attr-defined]
    return stream


def check_versions(stream: Stream) -> None:
    versions = [s.policy_version for _, s in stream.arrival]
    assert versions[0] == 0 and versions[-1] == 1, versions
    # A step stamped v1 was generated after the update was published; and once a step
    # *started* after v1 was served, nothing older than v1 is produced any more.
    for t, s in stream.arrival:
        if s.policy_version == 1 or any(v == 1 for v in s.token_versions):
            assert t >= stream.published_at  # type: ignore[attr-defined]
    assert stream.stats and stream.stats[-1].policy_version == 1
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

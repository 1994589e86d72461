"""Actor pieces without a model: never-dropping sends under backpressure, stats, sharding."""

from __future__ import annotations

import asyncio

from agent_r1_async.actors.actor import Actor, actor_index
from agent_r1_async.actors.stats import ActorCounters, StatsReporter
from agent_r1_async.config import RunConfig
from agent_r1_async.messages import ActorStats, decode_data
from agent_r1_async.transport import InProcTransport


def test_emit_waits_for_a_full_pipe_and_drops_nothing():
    transport = InProcTransport()
    sink = transport.puller(hwm=2)  # the pipe holds two messages
    actor = Actor(RunConfig(), "actor-0", transport, sink.endpoint, "", None)
    actor._pusher = transport.pusher(sink.endpoint)
    stats = [ActorStats("actor-0", float(i), 0, 0, 0, 0, 0, 0, 0, 0) for i in range(6)]
    received: list[float] = []

    async def drain() -> None:
        while len(received) < 6:
            await asyncio.sleep(0.02)  # a slow consumer
            frames = sink.recv(0)
            if frames is not None:
                received.append(decode_data(frames[0]).time)

    async def main() -> None:
        ticks = 0

        async def ticker() -> None:  # proves the loop keeps running while sends wait
            nonlocal ticks
            while len(received) < 6:
                ticks += 1
                await asyncio.sleep(0.005)

        await asyncio.gather(drain(), ticker(), *(actor.emit(s) for s in stats))
        assert ticks > 5

    asyncio.run(main())
    assert sorted(received) == [float(i) for i in range(6)] and actor.sent == 6


def test_stats_reporter_rates_over_the_window():
    now = [100.0]
    counters = ActorCounters()
    rep = StatsReporter("a0", counters, clock=lambda: now[0], wall_clock=lambda: 5.0)
    counters.tokens, counters.episodes_done, counters.episodes_failed = 400, 3, 1
    counters.gen_time_s, counters.env_time_s, counters.in_flight = 6.0, 2.0, 5
    now[0] = 102.0
    s = rep.report(policy_version=3)
    # 400 tokens and 4 ended episodes in 2 s -> 200 tok/s, 2 episodes/s
    assert (s.tokens_per_s, s.episodes_per_s, s.policy_version) == (200.0, 2.0, 3)
    assert (s.gen_time_s, s.env_time_s, s.episodes_in_flight) == (6.0, 2.0, 5)
    counters.tokens += 50
    now[0] = 103.0
    s = rep.report(policy_version=3)
    assert s.tokens_per_s == 50.0 and s.episodes_per_s == 0.0 and s.gen_time_s == 0.0
    assert s.episodes_done == 3  # totals stay totals


def test_actor_index_from_id():
    assert actor_index("actor-12") == 12 and actor_index("solo") == 0


def test_stop_aborts_in_flight_episodes_with_one_end_each():
    import threading
    import time

    from fakes_actors import CreditServer, FakeEngine, Stream, actor_config

    from agent_r1_async.models import tiny_model_dir

    cfg = actor_config("hf")
    cfg.model.name_or_path = tiny_model_dir()
    transport = InProcTransport()
    sink = transport.puller()
    credits = CreditServer(transport)
    # Two groups (4 one-step episodes) finish; every later request hangs until cancelled.
    engine = FakeEngine([28, 29], hang_from=4)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.endpoint, None, engine)
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    stream = Stream()
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while sum(len(v) for v in stream.ends.values()) < 4 or len(engine.calls) < 8:
            assert time.monotonic() < deadline
            frames = sink.recv(100)
            if frames is not None:
                stream.add(frames[0])
        stop.set()  # two more groups are now waiting on the engine
        thread.join(timeout=10)
        assert not thread.is_alive()
        while (frames := sink.recv(0)) is not None:
            stream.add(frames[0])
    finally:
        stop.set()
        credits.close()
    statuses = sorted(e[0].status for e in stream.ends.values())
    assert statuses == ["aborted"] * 4 + ["ok"] * 4  # the episodes running at stop said so
    stream.check(cfg.algorithm.group_size)  # and still: one end each, contiguous steps

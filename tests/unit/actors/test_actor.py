"""Actor pieces without a model: never-dropping sends under backpressure, stats, sharding."""

from __future__ import annotations

import asyncio
import contextlib

from agent_r1_async.actors.actor import Actor, actor_index
from agent_r1_async.actors.emitter import BatchEmitter
from agent_r1_async.actors.stats import ActorCounters, StatsReporter
from agent_r1_async.config import RunConfig
from agent_r1_async.wire.inproc import InProcTransport
from agent_r1_async.wire.messages import ActorStats, unpack_data
from tests.fakes.clock import FakeClock
from tests.fakes.transport import RecordingTransport


def test_emit_waits_for_a_full_pipe_and_drops_nothing():
    transport = InProcTransport()
    sink = transport.puller(hwm=2)  # the pipe holds two frames
    actor = Actor(RunConfig(), "actor-0", transport, sink.endpoint, "", None)
    actor._pusher = transport.pusher(sink.endpoint)
    # Frames of 2 messages; 2 more may wait for the pipe: 4 + 2 fit, the 7th emit must wait.
    actor._emitter = BatchEmitter(actor._pusher, max_batch=2, max_queued=2)
    stats = [ActorStats("actor-0", float(i), 0, 0, 0, 0, 0, 0, 0, 0) for i in range(10)]
    received: list[float] = []

    async def drain() -> None:
        while len(received) < 10:
            await asyncio.sleep(0.02)  # a slow consumer
            frames = sink.recv(0)
            if frames is not None:
                received.extend(msg.time for msg in unpack_data(frames))

    async def main() -> None:
        ticks = 0

        async def ticker() -> None:  # proves the loop keeps running while sends wait
            nonlocal ticks
            while len(received) < 10:
                ticks += 1
                await asyncio.sleep(0.005)

        await asyncio.gather(drain(), ticker(), *(actor.emit(s) for s in stats))
        assert ticks > 5

    asyncio.run(main())
    assert sorted(received) == [float(i) for i in range(10)] and actor.sent == 10


def test_stats_reporter_rates_over_the_window():
    clock = FakeClock(100.0)
    counters = ActorCounters()
    rep = StatsReporter("a0", counters, clock=clock, wall_clock=lambda: 5.0)
    counters.tokens, counters.episodes_done, counters.episodes_failed = 400, 3, 1
    counters.gen_time_s, counters.env_time_s, counters.in_flight = 6.0, 2.0, 5
    clock.t = 102.0
    s = rep.report(policy_version=3)
    # 400 tokens and 4 ended episodes in 2 s -> 200 tok/s, 2 episodes/s
    assert (s.tokens_per_s, s.episodes_per_s, s.policy_version) == (200.0, 2.0, 3)
    assert (s.gen_time_s, s.env_time_s, s.episodes_in_flight) == (6.0, 2.0, 5)
    counters.tokens += 50
    clock.t = 103.0
    s = rep.report(policy_version=3)
    assert s.tokens_per_s == 50.0 and s.episodes_per_s == 0.0 and s.gen_time_s == 0.0
    assert s.episodes_done == 3 and s.tokens_total == 450  # totals stay totals


def test_actor_index_from_id():
    assert actor_index("actor-12") == 12 and actor_index("solo") == 0


def test_stop_aborts_in_flight_episodes_with_one_end_each():
    import threading
    import time

    from agent_r1_async.models import tiny_model_dir
    from tests.fakes.checks import Stream
    from tests.fakes.engine import FakeEngine
    from tests.fakes.services import actor_config, buffer_service

    cfg = actor_config("hf")
    cfg.model.name_or_path = tiny_model_dir()
    transport = RecordingTransport()
    sink = transport.puller()
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    # Two groups (4 one-step episodes) finish; every later request hangs until cancelled.
    engine = FakeEngine.repeating([28, 29], hang_from=4)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint, None,
                  engine)
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    stream = Stream()
    received: list = []
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while sum(len(v) for v in stream.ends.values()) < 4 or len(engine.calls) < 8:
            assert time.monotonic() < deadline
            frames = sink.recv(100)
            if frames is not None:
                received += stream.add(frames)
        stop.set()  # two more groups are now waiting on the engine
        thread.join(timeout=10)
        assert not thread.is_alive()
        while (frames := sink.recv(0)) is not None:
            received += stream.add(frames)
    finally:
        stop.set()
        credits.stop()
    statuses = sorted(e[0].status for e in stream.ends.values())
    assert statuses == ["aborted"] * 4 + ["ok"] * 4  # the episodes running at stop said so
    stream.check(cfg.algorithm.group_size)  # and still: one end each, contiguous steps
    # Shutdown flushed the emitter before closing the pusher: the final ActorStats, emitted
    # right before shutdown without a loop turn, was sent, and nothing was sent after close.
    assert isinstance(received[-1], ActorStats) and actor.sent == len(received)
    events = transport.events
    assert events == ["send"] * actor._emitter.frames + ["close"]


def test_shutdown_flush_is_bounded_when_the_buffer_stops_reading(monkeypatch):
    import threading

    from agent_r1_async.actors import actor as actor_mod
    from agent_r1_async.models import tiny_model_dir
    from tests.fakes.engine import FakeEngine
    from tests.fakes.services import actor_config, buffer_service

    monkeypatch.setattr(actor_mod, "_FLUSH_TIMEOUT_S", 0.5)
    cfg = actor_config("hf")
    cfg.model.name_or_path = tiny_model_dir()
    transport = RecordingTransport(full=True)  # the buffer stopped reading
    sink = transport.puller()
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint, None,
                  FakeEngine.repeating([28, 29]))
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    try:
        thread.start()
        thread.join(timeout=2)  # episodes run, their records queue up, emit starts waiting
        stop.set()
        thread.join(timeout=20)
        assert not thread.is_alive()  # stopped after the bounded flush, not stuck on it
    finally:
        stop.set()
        credits.stop()
    assert actor.sent == 0 and actor._emitter.queued > 0  # nothing reached the pipe
    assert transport.events == ["close"]  # and the pusher was still closed


def test_reports_say_how_long_ago_the_actor_made_progress():
    """A hung engine step keeps the loop reporting: the report's `progress_age_s` grows until
    an engine or env call returns, an episode ends, or nothing is in flight."""
    clock = FakeClock(100.0)
    counters = ActorCounters(in_flight=2)
    rep = StatsReporter("a0", counters, clock=clock, wall_clock=lambda: 5.0)
    clock.t = 105.0
    assert rep.report(0).progress_age_s == 5.0  # nothing returned since the start
    counters.tokens = 8  # an engine call returned in this window
    clock.t = 110.0
    assert rep.report(0).progress_age_s == 0.0
    clock.t = 115.0
    assert rep.report(0).progress_age_s == 5.0
    clock.t = 130.0  # the engine hangs: reports still come, their age grows
    assert rep.report(0).progress_age_s == 20.0
    counters.env_time_s = 0.5  # an env call returned
    clock.t = 131.0
    assert rep.report(0).progress_age_s == 0.0
    clock.t = 140.0
    assert rep.report(0).progress_age_s == 9.0
    counters.episodes_failed, counters.in_flight = 1, 1  # an episode ended
    clock.t = 141.0
    assert rep.report(0).progress_age_s == 0.0
    counters.in_flight = 0  # idle, waiting on admission: not hung
    clock.t = 200.0
    assert rep.report(0).progress_age_s == 0.0


def test_a_restarted_actor_generates_nothing_until_its_weights_are_within_the_staleness():
    """A process Ray restarted mid-run starts from the initial weights (v0). It used to run
    its first group on them (the buffer then dropped it as stale); it now learns the learner's
    version when it connects and waits for the next publish before it generates."""
    import threading
    import time

    import torch

    from agent_r1_async.models import tiny_model_dir
    from agent_r1_async.weights.zmq import ZmqWeightSender
    from agent_r1_async.wire.messages import StepRecord
    from tests.fakes.engine import FakeEngine
    from tests.fakes.services import actor_config, buffer_service

    cfg = actor_config("hf")  # buffer.max_staleness 2: v0 is 5 behind v5
    cfg.model.name_or_path = tiny_model_dir()
    transport = InProcTransport()
    sink = transport.puller()
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    credits.set_version(5)  # the learner is at v5
    sender = ZmqWeightSender(transport, "inproc://weights")
    engine = FakeEngine.repeating([28, 29])
    actor = Actor(cfg, "actor-0", transport, sink.endpoint, credits.control_endpoint,
                  sender.endpoint, engine)
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    steps: list[StepRecord] = []
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while actor.learner_version != 5 or not hasattr(actor, "runner"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # its loop runs (20 turns at least): nothing may be generated yet
        assert engine.calls == []
        sender.publish(5, {"w": torch.zeros(2)})
        while len(steps) < 4:  # one group of 2 episodes, 2 steps each at most
            assert time.monotonic() < deadline
            frames = sink.recv(100)
            if frames is not None:
                steps += [m for m in unpack_data(frames) if isinstance(m, StepRecord)]
    finally:
        stop.set()
        thread.join(timeout=10)
        credits.stop()
    assert engine.loaded == [5]
    assert {s.policy_version for s in steps} == {5}


def test_a_hung_engine_step_shows_as_silence_while_the_reports_still_come():
    """The heartbeat is the loop's own report, and it carries the last progress: with every
    engine request hanging the actor's loop keeps reporting, yet the buffer sees it silent
    (what the launcher judges against launch.unresponsive_s)."""
    import threading
    import time

    from agent_r1_async.models import tiny_model_dir
    from tests.fakes.engine import FakeEngine
    from tests.fakes.services import actor_config, buffer_service, wait_for

    cfg = actor_config("hf")  # a report every 0.5 s
    cfg.model.name_or_path = tiny_model_dir()
    transport = InProcTransport()
    credits = buffer_service(transport, algo=cfg.algorithm, start=True)
    engine = FakeEngine.repeating([28, 29], hang_from=0)  # no request ever returns
    actor = Actor(cfg, "actor-0", transport, credits.data_endpoint, credits.control_endpoint,
                  None, engine)
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,), daemon=True)
    try:
        thread.start()
        wait_for(lambda: credits.metrics().actor_silence_s.get("actor-0", 0.0) >= 2.0, 30,
                 "the hung actor's silence")
        first = credits.metrics().actors["actor-0"]
        time.sleep(1.5)  # three more reports
        stats = credits.metrics()
    finally:
        stop.set()
        thread.join(timeout=10)
        credits.stop()
    assert engine.calls and first.episodes_in_flight > 0
    report = stats.actors["actor-0"]
    assert report.time > first.time and report.progress_age_s > first.progress_age_s
    assert stats.actor_silence_s["actor-0"] >= 2.5  # it kept growing


def test_groups_the_buffer_no_longer_knows_are_stopped_and_finished_ones_left_to_collect():
    """`_drop` cancels the running groups the buffer named unknown; one that already finished
    (here with an emit failure) stays in `running` so the loop surfaces its result."""
    async def scenario() -> tuple[dict, bool, int]:
        actor = Actor.__new__(Actor)
        actor.actor_id, actor.groups_dropped = "actor-0", 0

        async def fails() -> None:
            raise RuntimeError("emit failed")

        finished = asyncio.create_task(fails())
        pending = asyncio.create_task(asyncio.sleep(60))
        kept = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0)
        running = {finished: "g-done", pending: "g-lost", kept: "g-known"}
        await actor._drop(running, ["g-done", "g-lost", "g-never-here"])
        left = set(running.values())
        kept.cancel()
        with contextlib.suppress(RuntimeError):
            await finished
        return left, pending.cancelled(), actor.groups_dropped

    left, cancelled, dropped = asyncio.run(scenario())
    assert left == {"g-done", "g-known"} and cancelled and dropped == 1

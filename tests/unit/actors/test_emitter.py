"""BatchEmitter: coalesced frames, order, back-pressure, flush and failures (in-process pipe)."""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async.actors.emitter import BatchEmitter, SendFailed
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.inproc import InProcTransport
from tests.fakes.transport import BrokenPusher

HANG_S = 30.0
"""How long an awaited step may take before the test calls it hung: a guard, not a bound."""


def _stats(i: int) -> m.ActorStats:
    return m.ActorStats("a0", float(i), 0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)


def _pipe(hwm: int = 100):
    transport = InProcTransport()
    sink = transport.puller(hwm=hwm)
    return sink, transport.pusher(sink.endpoint)


def _frames(sink) -> list[bytes]:
    out = []
    while (frames := sink.recv(0)) is not None:
        assert len(frames) == 1
        out.append(bytes(frames[0]))
    return out


def _times(frame: bytes) -> list[float]:
    return [msg.time for msg in m.unpack_data([frame])]


@pytest.mark.parametrize(("n", "max_batch", "sizes"), [
    (10, 4, [4, 4, 2]),  # two cut inline at max_batch, the rest at the next loop turn
    (128, 64, [64, 64]),
    (129, 64, [64, 64, 1]),  # the 129th goes alone: a plain frame
])
def test_emits_in_one_turn_make_ceil_n_over_max_batch_frames_in_order(n, max_batch, sizes):
    sink, pusher = _pipe()
    em = BatchEmitter(pusher, max_batch=max_batch)

    async def main() -> None:
        for i in range(n):  # no await here yields to the loop
            await em.emit(_stats(i))
        assert sink.queue.qsize() == n // max_batch  # only the full frames left so far
        await asyncio.sleep(0)  # the loop turn: the rest goes out
        assert sink.queue.qsize() == len(sizes)

    asyncio.run(main())
    frames = _frames(sink)
    assert [len(_times(f)) for f in frames] == sizes
    assert [t for f in frames for t in _times(f)] == [float(i) for i in range(n)]
    for f, size in zip(frames, sizes, strict=True):
        assert isinstance(m.decode_data(f), m.DataBatch) == (size > 1)
    assert em.sent == n and em.frames == len(sizes)


def test_one_emit_then_a_yield_sends_the_plain_message():
    sink, pusher = _pipe()
    em = BatchEmitter(pusher)

    async def main() -> None:
        await em.emit(_stats(7))
        assert sink.queue.qsize() == 0  # not before the producer yields
        await asyncio.sleep(0)
        assert sink.queue.qsize() == 1

    asyncio.run(main())
    assert _frames(sink) == [m.encode(_stats(7))]  # not a DataBatch of one


def test_emits_between_yields_share_frames_and_keep_order():
    sink, pusher = _pipe()
    em = BatchEmitter(pusher)

    async def producer(first: int) -> None:  # emits two, yields, emits two more
        await em.emit(_stats(first))
        await em.emit(_stats(first + 1))
        await asyncio.sleep(0)
        await em.emit(_stats(first + 2))
        await em.emit(_stats(first + 3))

    async def main() -> None:
        await asyncio.gather(producer(0), producer(10))
        await asyncio.sleep(0)

    asyncio.run(main())
    # Turn 1: both producers emit two each -> one frame; turn 2: two more each -> one frame.
    assert [_times(f) for f in _frames(sink)] == [[0.0, 1.0, 10.0, 11.0], [2.0, 3.0, 12.0, 13.0]]


def test_a_full_pipe_makes_emit_wait_and_drops_nothing():
    sink, pusher = _pipe(hwm=1)
    em = BatchEmitter(pusher, max_batch=1, max_queued=1)
    got: list[bytes] = []

    async def main() -> None:
        await em.emit(_stats(0))  # into the pipe
        await em.emit(_stats(1))  # refused: waits in the emitter, retried with backoff
        assert (sink.queue.qsize(), em.sent) == (1, 1)
        third = asyncio.create_task(em.emit(_stats(2)))
        await asyncio.sleep(0.05)  # several retries (5, 10, 20 ms) against the full pipe
        assert not third.done() and em.sent == 1  # one message waits: the emit waits too
        got.extend(_frames(sink))  # room for one frame
        await asyncio.wait_for(third, HANG_S)  # 1 entered the pipe, so 2 was accepted
        assert em.sent == 2
        flush = asyncio.create_task(em.flush())
        while len(got) < 3:
            await asyncio.sleep(0.005)
            got.extend(_frames(sink))
        await asyncio.wait_for(flush, HANG_S)

    asyncio.run(main())
    assert [_times(f) for f in got] == [[0.0], [1.0], [2.0]]
    assert em.sent == 3 and em.frames == 3


def test_release_lets_a_waiting_emit_through_and_later_ones_never_wait():
    sink, pusher = _pipe(hwm=1)
    em = BatchEmitter(pusher, max_batch=1, max_queued=1)

    async def main() -> None:
        await em.emit(_stats(0))  # into the pipe, which is now full
        await em.emit(_stats(1))  # refused: queued
        blocked = asyncio.create_task(em.emit(_stats(2)))
        await asyncio.sleep(0.02)
        assert not blocked.done()  # back-pressure: the queue is at max_queued
        em.release()  # shutting down, and nobody reads the pipe
        await asyncio.wait_for(blocked, HANG_S)
        for i in range(3, 6):
            await asyncio.wait_for(em.emit(_stats(i)), HANG_S)
        assert (em.sent, em.queued) == (1, 5)  # accepted and kept, in order, for the flush
        got = _frames(sink)
        while em.queued:
            await asyncio.sleep(0.005)
            got += _frames(sink)
        got += _frames(sink)
        assert [t for f in got for t in _times(f)] == [float(i) for i in range(6)]

    asyncio.run(main())


def test_flush_delivers_pending_messages_without_a_loop_turn():
    sink, pusher = _pipe()
    em = BatchEmitter(pusher)

    async def main() -> None:
        for i in range(3):
            await em.emit(_stats(i))
        await em.flush()  # what shutdown does before closing the pusher
        assert sink.queue.qsize() == 1 and em.sent == 3

    asyncio.run(main())
    assert [_times(f) for f in _frames(sink)] == [[0.0, 1.0, 2.0]]


def test_flush_waits_for_a_full_pipe():
    sink, pusher = _pipe(hwm=1)
    em = BatchEmitter(pusher, max_batch=2)

    async def main() -> None:
        for i in range(4):  # frames [0, 1] (into the pipe) and [2, 3] (refused)
            await em.emit(_stats(i))
        flush = asyncio.create_task(em.flush())
        await asyncio.sleep(0.03)
        assert not flush.done() and em.sent == 2
        first = _frames(sink)
        await asyncio.wait_for(flush, HANG_S)
        assert em.sent == 4
        return first + _frames(sink)

    frames = asyncio.run(main())
    assert [_times(f) for f in frames] == [[0.0, 1.0], [2.0, 3.0]]


def test_a_failed_send_in_the_loop_turn_fails_later_emits_check_and_flush():
    em = BatchEmitter(BrokenPusher())

    async def main() -> None:
        await em.emit(_stats(0))  # accepted; the send fails in the loop callback
        await asyncio.sleep(0)
        with pytest.raises(SendFailed, match="socket closed"):
            em.check()
        with pytest.raises(SendFailed):
            await em.emit(_stats(1))
        with pytest.raises(SendFailed):
            await em.flush()

    asyncio.run(main())
    assert em.sent == 0


def test_a_failed_inline_send_raises_from_emit():
    em = BatchEmitter(BrokenPusher(), max_batch=2)

    async def main() -> None:
        await em.emit(_stats(0))
        with pytest.raises(SendFailed):
            await em.emit(_stats(1))  # the second fills the frame: sent inline, fails

    asyncio.run(main())


def test_an_unencodable_message_raises_at_emit_and_is_not_queued():
    sink, pusher = _pipe()
    em = BatchEmitter(pusher)

    async def main() -> None:
        with pytest.raises(NotImplementedError, match="cannot encode object"):
            await em.emit(object())  # type: ignore[arg-type]
        await em.emit(_stats(1))
        await em.flush()

    asyncio.run(main())
    assert _frames(sink) == [m.encode(_stats(1))] and em.sent == 1


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_batch"):
        BatchEmitter(BrokenPusher(), max_batch=8, max_queued=4)
    with pytest.raises(ValueError, match="max_batch"):
        BatchEmitter(BrokenPusher(), max_batch=0)


def test_a_failure_to_build_the_frame_fails_the_emitter_instead_of_losing_messages():
    class BadFrame(BatchEmitter):
        def frame(self, items: list[bytes]) -> bytes:  # type: ignore[override]
            raise MemoryError("no room for the frame")

    sink, pusher = _pipe()
    em = BadFrame(pusher)

    async def main() -> None:
        await em.emit(_stats(0))
        await asyncio.sleep(0)  # the cut fails in the loop callback
        with pytest.raises(SendFailed, match="no room"):
            await em.flush()

    asyncio.run(main())
    assert sink.queue.qsize() == 0 and em.sent == 0

"""Transport benchmark: StepRecords from an actor into the buffer's socket, against raw ZeroMQ.

    .venv/bin/python -m bench.bench_transport            # ~2 minutes on 2 cores
    .venv/bin/python -m bench.bench_transport --quick    # ~30 s

Two processes over tcp loopback, the sender in a spawned process, the receiver here. Three runs
per repeat, all with the same records (same bytes: fixed timestamps):
- raw, one frame per record: the sender pushes pre-encoded records on a bare PUSH socket, one
  frame each; the receiver only receives them on a bare PULL socket. The baseline the
  transport's target (>= 0.7x) refers to.
- transport: the sender is an actor's send path: the real `BatchEmitter` in an asyncio loop,
  fed by `--in-flight` episode tasks that each emit a record and then yield to the loop (as an
  episode awaits its next generation), so the in-flight episodes' steps go out together in
  one frame; the emitter encodes, coalesces and sends with `ZmqPusher.send(timeout_ms=0)`.
  The receiver does what the buffer service does before ingestion (`BufferService._drain_data`):
  `ZmqPuller.recv(timeout_ms=0)` and `messages.unpack_data` (typed msgspec decode of a plain
  message or a DataBatch, validation) of every message.
- raw, coalesced frames: bare PUSH/PULL of exactly the frames the transport run sent (its
  records grouped as its emitter grouped them, built by the emitter's own `frame`): the bytes
  cost of the same frames, without encode, asyncio or decode.
Buffer ingestion (assembly, storage) is not included: that is `bench_buffer.py`. Records/s,
MB/s, CPU µs/record on each side, the mean records per frame of each transport run, as the
median of `--repeats` interleaved repeats.

The headline is like for like: the transport against raw ZeroMQ sending the SAME frames —
with 16 episodes in flight (coalesced frames, `--in-flight 16`) against raw coalesced frames,
with one episode in flight (one record per frame, `--in-flight 1`) against raw one record per
frame. Transport at 16 records per frame over raw at 1 mixes coalescing (which raw ZeroMQ gets
too) with our cost; it is printed last, marked. How many records a frame holds in a real run is
the launch metric `buffer/records_per_frame`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import time
from typing import Any

import zmq

from agent_r1_async.actors.emitter import BatchEmitter
from agent_r1_async.wire import messages as m  # light imports only: spawned children re-import
from agent_r1_async.wire.zmq import ZmqTransport
from bench.children import next_message
from bench.stats import fmt_spread, load_line

MODES = ("raw", "transport", "raw_coalesced")


def make_records(n: int, context_tokens: int, action_tokens: int, seed: int = 0) -> list[Any]:
    """n StepRecords (a few distinct token lists, so building them is cheap), deterministic."""
    rng = random.Random(seed)
    ctxs = [[rng.randrange(49152) for _ in range(context_tokens)] for _ in range(8)]
    acts = [[rng.randrange(49152) for _ in range(action_tokens)] for _ in range(8)]
    lps = [[-rng.random() for _ in range(action_tokens)] for _ in range(8)]
    return [  # packed, as `actors.rollout` builds them
        m.StepRecord(f"e{i // 4}", f"g{i // 16}", "t", "a0", "bench", i % 4,
                     m.TokenIds(ctxs[i % 8]), m.TokenIds(acts[i % 8]), m.LogProbs(lps[i % 8]),
                     policy_version=3, created_at=1.7e9 + i / 1000)
        for i in range(n)
    ]


class _CountingEmitter(BatchEmitter):
    """The real emitter, noting how many records each frame holds (to replay the frames)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.counts: list[int] = []

    def frame(self, items: list[bytes]) -> bytes:  # type: ignore[override]
        self.counts.append(len(items))
        return BatchEmitter.frame(items)


def _raw_send(endpoint: str, frames: list[bytes], q: Any) -> None:
    zctx = zmq.Context()
    sock = zctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.connect(endpoint)
    q.put("ready")
    c0 = time.process_time()
    for f in frames:
        sock.send(f, copy=False)
    q.put((time.process_time() - c0, []))
    sock.close(linger=30_000)
    zctx.term()


def _actor_send(endpoint: str, records: list[Any], in_flight: int, q: Any) -> None:
    transport = ZmqTransport()
    pusher = transport.pusher(endpoint)
    emitter = _CountingEmitter(pusher)

    async def episode(mine: list[Any]) -> None:
        for r in mine:
            await emitter.emit(r)
            await asyncio.sleep(0)  # awaiting the next generation: the loop turns

    async def actor() -> None:
        await asyncio.gather(*(episode(records[k::in_flight]) for k in range(in_flight)))
        await emitter.flush()

    q.put("ready")
    c0 = time.process_time()
    asyncio.run(actor())
    q.put((time.process_time() - c0, emitter.counts))
    pusher.close()
    transport.close()


def _sender(mode: str, endpoint: str, n: int, ctx_t: int, act_t: int, in_flight: int,
            counts: list[int], q: Any) -> None:
    records = make_records(n, ctx_t, act_t)
    if mode == "transport":
        _actor_send(endpoint, records, in_flight, q)
        return
    encoded = [m.encode(r) for r in records]
    if mode == "raw":
        frames = encoded
    else:  # replay the transport run's grouping with the emitter's own framing
        frames, i = [], 0
        for c in counts:
            frames.append(BatchEmitter.frame(encoded[i : i + c]))
            i += c
    _raw_send(endpoint, frames, q)


def run(mode: str, n: int, ctx_t: int, act_t: int, in_flight: int,
        counts: list[int]) -> tuple[float, float, float, int, list[int]]:
    """(records/s, receiver CPU µs/record, sender CPU µs/record, bytes, records per frame)."""
    transport = ZmqTransport()
    if mode == "transport":
        puller = transport.puller("tcp://127.0.0.1:0")
        endpoint = puller.endpoint
    else:
        sock = transport.ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        endpoint = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    mpc = mp.get_context("spawn")
    q = mpc.Queue()
    proc = mpc.Process(target=_sender, args=(mode, endpoint, n, ctx_t, act_t, in_flight,
                                             counts, q))
    proc.start()
    next_message(q, proc, 60, "the sender process")
    if mode == "transport":
        # The service's loop: poll, then drain without blocking (`BufferService._drain_data`:
        # `ZmqPuller.recv(timeout_ms=0)`, `messages.unpack_data`), ~2,000 records a pass.
        sock = puller._sock
        if not sock.poll(60_000):
            raise RuntimeError("transport run: no first record")
        frames = puller.recv(timeout_ms=0)
        nbytes, first = len(frames[0]), len(m.unpack_data(frames))
        got = first
        t0, c0 = time.perf_counter(), time.process_time()
        while got < n:
            if not sock.poll(30_000):  # a starved sender on a loaded box pauses for seconds
                raise RuntimeError(f"transport run stalled after {got} of {n} records")
            budget = 2000
            while budget > 0:
                frames = puller.recv(timeout_ms=0)
                if frames is None:
                    break
                msgs = m.unpack_data(frames)
                if type(msgs[0]) is not m.StepRecord:
                    raise RuntimeError("decoded the wrong message type")
                nbytes += len(frames[0])
                got += len(msgs)
                budget -= len(msgs)
    else:
        sizes = [1] * n if mode == "raw" else counts
        nbytes, first = len(sock.recv()), sizes[0]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(len(sizes) - 1):
            nbytes += len(sock.recv())
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    send_cpu, sent_counts = next_message(q, proc, 60, "the sender process")
    proc.join(60)
    if mode == "transport":
        puller.close()
    else:
        sock.close(linger=0)
    transport.close()
    timed = n - first
    return timed / dt, cpu / timed * 1e6, send_cpu / n * 1e6, nbytes, sent_counts


def schedule(in_flight: list[int]) -> list[tuple[str, int]]:
    """One repeat's runs, each transport run next to its like-for-like baseline: raw one
    frame per record, then per in-flight count k the transport, then (k > 1) the raw run of
    its coalesced frames (k = 1 sends one record per frame: raw is its baseline)."""
    runs: list[tuple[str, int]] = [("raw", 1)]
    for k in sorted(set(in_flight)):
        runs.append(("transport", k))
        if k > 1:
            runs.append(("raw_coalesced", k))
    return runs


def like_for_like(k: int) -> str:
    """The raw run a transport run with k episodes in flight is compared with."""
    return "raw" if k == 1 else "raw_coalesced"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--context-tokens", type=int, default=512)
    ap.add_argument("--action-tokens", type=int, default=64)
    ap.add_argument("--in-flight", type=int, nargs="+", default=[16, 1],
                    help="concurrent episodes of the simulated actor (1: no coalescing)")
    ap.add_argument("--quick", action="store_true", help="30k records, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 30_000, 1
    n = args.records
    load0 = load_line()
    res: dict[tuple[str, int], list[tuple[float, float, float, int, list[int]]]] = {}
    per_frame: dict[int, list[float]] = {}
    for _ in range(args.repeats):  # interleaved: load drifts hit every run alike
        counts: dict[int, list[int]] = {}
        for mode, k in schedule(args.in_flight):  # raw_coalesced replays transport k's frames
            r = run(mode, n, args.context_tokens, args.action_tokens, k, counts.get(k, []))
            res.setdefault((mode, k), []).append(r)
            if mode == "transport":
                counts[k] = r[4]
                per_frame.setdefault(k, []).append(n / len(r[4]))
    med = statistics.median
    size = res[("raw", 1)][0][3] / n
    print(f"## Actor -> buffer transport: {n} StepRecords ({size:.0f} B each: "
          f"{args.context_tokens}+{args.action_tokens} tokens), tcp loopback, 1 sender, "
          f"median of {args.repeats} interleaved repeats; {load0} at the start")
    print(f"{'':60} {'records/s':>10} {'MB/s':>7} {'recv CPU µs':>11} {'send CPU µs':>11}")
    for mode, k in schedule(args.in_flight):
        label = {"raw": "raw ZeroMQ PUSH/PULL, one frame per record",
                 "raw_coalesced": f"raw ZeroMQ PUSH/PULL, transport k={k}'s frames",
                 "transport": f"transport, {k} in flight (emitter -> unpack_data)"}[mode]
        rows = res[(mode, k)]
        rate = med(r[0] for r in rows)
        print(f"{label:60} {rate:>10,.0f} {rate * size / 1e6:>7.1f} "
              f"{med(r[1] for r in rows):>11.2f} {med(r[2] for r in rows):>11.2f}")
    for k in sorted(per_frame):
        print(f"{f'records per frame, transport k={k} (mean)':60} {med(per_frame[k]):>10.1f}")
    print("like for like (same records per frame on both sides):")
    for k in sorted(per_frame):
        base = like_for_like(k)
        ratios = [t[0] / r[0] for t, r in zip(res[("transport", k)], res[(base, k)],
                                               strict=True)]
        print(f"  transport k={k} / {base:<14} {fmt_spread(ratios, 2, '×')}   (per repeat: "
              f"{', '.join(f'{x:.2f}' for x in ratios)})")
    for k in sorted(k for k in per_frame if k > 1):  # the old headline, not like for like
        ratios = [t[0] / r[0] for t, r in zip(res[("transport", k)], res[("raw", 1)], strict=True)]
        print(f"  (not like for like) transport k={k} / raw one per frame: "
              f"{fmt_spread(ratios, 2, '×')}")
    print(f"({load_line()} at the end)")


if __name__ == "__main__":
    main()

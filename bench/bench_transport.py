"""Transport benchmark: StepRecords from an actor into the buffer's socket, against raw ZeroMQ.

    .venv/bin/python bench/bench_transport.py            # ~1 minute on 2 cores
    .venv/bin/python bench/bench_transport.py --quick    # ~15 s

Two processes over tcp loopback, the sender in a spawned process, the receiver here:
- raw ZeroMQ: the sender pushes pre-encoded frames on a bare PUSH socket; the receiver only
  receives them on a bare PULL socket (the bytes cost, nothing else);
- transport: the sender does what an actor does per record — `messages.encode(StepRecord)`
  and `ZmqPusher.send([frame], timeout_ms=0)` (retrying while the pipe is full) — and the
  receiver does what the buffer service does before ingestion — `ZmqPuller` receive and
  `messages.decode_data` (typed msgspec decode, validation) of every frame.
Same records, same bytes. Buffer ingestion (assembly, storage) is not included: that is
`bench_buffer.py`. Records/s of both, MB/s, CPU µs/record on each side, the ratio, as the
median of `--repeats` alternating runs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_r1_async import messages as m  # light imports only: spawned children re-import
from agent_r1_async.transport import ZmqTransport


def make_records(n: int, context_tokens: int, action_tokens: int, seed: int = 0) -> list[Any]:
    """n StepRecords (a few distinct token lists, so building them is cheap)."""
    rng = random.Random(seed)
    ctxs = [[rng.randrange(49152) for _ in range(context_tokens)] for _ in range(8)]
    acts = [[rng.randrange(49152) for _ in range(action_tokens)] for _ in range(8)]
    lps = [[-rng.random() for _ in range(action_tokens)] for _ in range(8)]
    return [  # packed, as `actors.rollout` builds them
        m.StepRecord(f"e{i // 4}", f"g{i // 16}", "t", "a0", "bench", i % 4,
                     m.TokenIds(ctxs[i % 8]), m.TokenIds(acts[i % 8]), m.LogProbs(lps[i % 8]),
                     policy_version=3, created_at=time.time())
        for i in range(n)
    ]


def _sender(mode: str, endpoint: str, n: int, ctx_t: int, act_t: int, q: Any) -> None:
    records = make_records(n, ctx_t, act_t)
    if mode == "raw":
        frames = [m.encode(r) for r in records]
        zctx = zmq.Context()
        sock = zctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.connect(endpoint)
        q.put("ready")
        c0 = time.process_time()
        for f in frames:
            sock.send(f, copy=False)
        q.put(time.process_time() - c0)
        sock.close(linger=30_000)
        zctx.term()
        return
    transport = ZmqTransport()
    pusher = transport.pusher(endpoint)
    q.put("ready")
    c0 = time.process_time()
    for r in records:  # the actor's emit(): encode, non-blocking send, retry while full
        frame = m.encode(r)
        while not pusher.send([frame], timeout_ms=0):
            time.sleep(0.0005)
    q.put(time.process_time() - c0)
    pusher.close()
    transport.close()


def run(mode: str, n: int, ctx_t: int, act_t: int) -> tuple[float, float, float, int]:
    """(records/s, receiver CPU µs/record, sender CPU µs/record, bytes received)."""
    transport = ZmqTransport()
    if mode == "raw":
        sock = transport.ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        endpoint = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    else:
        puller = transport.puller("tcp://127.0.0.1:0")
        endpoint = puller.endpoint
    mpc = mp.get_context("spawn")
    q = mpc.Queue()
    proc = mpc.Process(target=_sender, args=(mode, endpoint, n, ctx_t, act_t, q))
    proc.start()
    q.get(timeout=60)
    nbytes = 0
    if mode == "raw":
        nbytes += len(sock.recv())
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n - 1):
            nbytes += len(sock.recv())
    else:
        # The service's loop: poll, then drain up to 2,000 frames without blocking, typed
        # decode of each (`BufferService._drain_data`: `ZmqPuller.recv(timeout_ms=0)`).
        sock = puller._sock
        if not sock.poll(60_000):
            raise RuntimeError("transport run: no first record")
        frames = sock.recv_multipart()
        nbytes, got = len(frames[0]), 1
        m.decode_data(frames[0])
        t0, c0 = time.perf_counter(), time.process_time()
        while got < n:
            if not sock.poll(1000):
                raise RuntimeError(f"transport run stalled after {got} of {n} records")
            for _ in range(2000):
                frames = puller.recv(timeout_ms=0)
                if frames is None:
                    break
                if not isinstance(m.decode_data(frames[0]), m.StepRecord):
                    raise RuntimeError("decoded the wrong message type")
                nbytes += len(frames[0])
                got += 1
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    send_cpu = q.get(timeout=60)
    proc.join(60)
    if mode == "raw":
        sock.close(linger=0)
    else:
        puller.close()
    transport.close()
    return (n - 1) / dt, cpu / (n - 1) * 1e6, send_cpu / n * 1e6, nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--context-tokens", type=int, default=512)
    ap.add_argument("--action-tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="30k records, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 30_000, 1
    n = args.records
    res: dict[str, list[tuple[float, float, float, int]]] = {"raw": [], "transport": []}
    for _ in range(args.repeats):
        for mode in res:
            res[mode].append(run(mode, n, args.context_tokens, args.action_tokens))
    med = statistics.median
    frame = res["raw"][0][3] / n
    print(f"## Actor -> buffer transport: {n} StepRecords ({frame:.0f} B frames: "
          f"{args.context_tokens}+{args.action_tokens} tokens), tcp loopback, 1 sender, "
          f"median of {args.repeats}")
    print(f"{'':44} {'records/s':>10} {'MB/s':>7} {'recv CPU µs':>11} {'send CPU µs':>11}")
    rates = {}
    for mode, label in (("raw", "raw ZeroMQ PUSH/PULL (pre-encoded bytes)"),
                        ("transport", "encode+ZmqPusher -> ZmqPuller+decode_data")):
        rate = med(r[0] for r in res[mode])
        rates[mode] = rate
        print(f"{label:44} {rate:>10,.0f} {rate * frame / 1e6:>7.1f} "
              f"{med(r[1] for r in res[mode]):>11.2f} {med(r[2] for r in res[mode]):>11.2f}")
    ratios = [t[0] / r[0] for t, r in zip(res["transport"], res["raw"], strict=True)]
    print(f"{'ratio transport / raw':44} {med(ratios):>10.2f}   (per repeat: "
          f"{', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

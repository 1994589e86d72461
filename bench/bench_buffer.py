"""Buffer benchmark: ingest throughput against raw ZeroMQ, and sample latency vs stored groups.

    .venv/bin/python -m bench.bench_buffer            # ~1 minute on 2 cores
    .venv/bin/python -m bench.bench_buffer --records 20000 --max-groups 100000   # quicker

Part 1 sends the same pre-encoded StepRecord/EpisodeEnd frames (episodes of 4 steps, groups
of 4, 128 context + 32 action tokens per step, ~0.8 KB per frame) from a separate process
over tcp loopback, once into a bare PULL socket that only counts frames (the baseline) and
once into the BufferService (decode, validate, assemble, store). It prints records/s of both
and their ratio. Part 2 fills a GroupStore (and a bare SumTree) to 10^3 .. 10^6 groups and
prints the latency of one prioritized batch draw and of single sum-tree operations: the
cost grows with log2(n), not n.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import random
import time
from collections import Counter

import zmq

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.buffers.store import GroupStore, StoredGroup
from agent_r1_async.buffers.sumtree import SumTree
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.zmq import ZmqTransport

STEPS, GROUP = 4, 4


def n_groups(n_records: int) -> int:
    return math.ceil(n_records / (GROUP * (STEPS + 1)))


def make_frames(n_records: int, seed: int = 0, group_ids: list[str] | None = None) -> list[bytes]:
    """Encoded records of whole groups: GROUP episodes × (STEPS steps + 1 end). `group_ids`:
    ids the service granted (it refuses records of other groups); by default ids of the same
    length, for the raw baseline."""
    rng = random.Random(seed)
    frames: list[bytes] = []
    g = 0
    while len(frames) < n_records:
        gid = group_ids[g] if group_ids is not None else f"00000000-{g}"
        for e in range(GROUP):
            eid = f"{gid}-e{e}"
            for i in range(STEPS):
                rec = m.StepRecord(
                    eid, gid, f"t{g}", "a0", "bench", i,
                    m.TokenIds([rng.randrange(49152) for _ in range(128)]),  # packed, as
                    m.TokenIds([rng.randrange(49152) for _ in range(32)]),   # actors send
                    m.LogProbs([-rng.random() for _ in range(32)]),
                    policy_version=0,
                )  # fmt: skip
                frames.append(m.encode(rec))
            end = m.EpisodeEnd(eid, gid, f"t{g}", "a0", "bench", STEPS, rng.random(), "ok", GROUP)
            frames.append(m.encode(end))
        g += 1
    return frames


def _sender(endpoint: str, n_records: int, ready: mp.Event,
            group_ids: list[str] | None = None) -> None:
    """A bare PUSH socket (no per-message poll), so the sender is not the bottleneck."""
    frames = make_frames(n_records, group_ids=group_ids)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.connect(endpoint)
    ready.set()
    for f in frames:
        sock.send(f, copy=False)
    sock.close(linger=10_000)
    ctx.term()


def _start_sender(endpoint: str, n: int, group_ids: list[str] | None = None) -> mp.Process:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_sender, args=(endpoint, n, ready, group_ids), daemon=True)
    proc.start()
    ready.wait(60)
    return proc


def bench_raw(n: int) -> tuple[float, float, int]:
    """Records/s into a bare PULL socket that only receives (and the bytes received)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 10_000)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    proc = _start_sender(f"tcp://127.0.0.1:{port}", n)
    nbytes = len(sock.recv())
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n - 1):
        nbytes += len(sock.recv())
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    proc.join(30)
    sock.close(linger=0)
    ctx.term()
    return (n - 1) / dt, cpu / (n - 1) * 1e6, nbytes


def bench_service(n: int) -> tuple[float, float, m.BufferStats]:
    """Records/s through BufferService (decode, validate, assemble, store)."""
    transport = ZmqTransport()
    groups = n_groups(n)  # credits for all of them up front: staleness and rate never bind
    cfg = BufferConfig(max_bytes=8 << 30, snapshot_interval_s=0.0, max_staleness=groups,
                       spi_tolerance=float(groups + 1))
    service = BufferService(cfg, AlgorithmConfig(group_size=GROUP), transport)
    group_ids = service.buffer.grant("a0", groups).group_ids
    assert len(group_ids) == groups, f"{len(group_ids)} of {groups} credits"
    proc = _start_sender(service.data_endpoint, n, group_ids)
    service.start()
    buf = service.buffer
    while buf.records == 0:
        time.sleep(0.0005)
    t0, c0, first = time.perf_counter(), time.process_time(), buf.records
    while buf.records < n:  # coarse polling: this thread must not steal the GIL often
        time.sleep(0.005)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = service.metrics()
    service.stop()
    proc.join(30)
    transport.close()
    return (n - first) / dt, cpu / (n - first) * 1e6, stats


def bench_sampling(
    sizes: list[int], batch: int, reps: int
) -> list[tuple[int, float, float, float]]:
    """(n, batch draw µs, sum-tree find µs, sum-tree update µs) at each store size."""
    rng = random.Random(0)
    store = GroupStore("prioritized", 0.6, 0.4, 0.5, 0.01, 10**6, 10**9, seed=0)
    tree = SumTree()
    hist = Counter({0: 32})
    rows = []
    for n in sizes:
        while len(store) < n:  # light groups: the cost measured is the index, not the payload
            i = len(store)
            group = m.Group(f"g{i}", "t", "bench", [])
            v = rng.randrange(4)
            store.insert(StoredGroup(group, 0, v, v, rng.random(), hist))
            tree.add(rng.random() + 0.01)
        t0 = time.perf_counter()
        for _ in range(reps):
            store.sample(batch)
        draw = (time.perf_counter() - t0) / reps * 1e6
        us = [rng.random() * tree.total for _ in range(reps * batch)]
        t0 = time.perf_counter()
        for u in us:
            tree.find(u)
        find = (time.perf_counter() - t0) / len(us) * 1e6
        slots = [rng.randrange(n) for _ in range(reps * batch)]
        t0 = time.perf_counter()
        for s in slots:
            tree.update(s, 1.0)
        update = (time.perf_counter() - t0) / len(slots) * 1e6
        rows.append((n, draw, find, update))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--max-groups", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()

    n = args.records
    raw_rate, raw_cpu, nbytes = bench_raw(n)
    svc_rate, svc_cpu, stats = bench_service(n)
    print(f"## Ingest: {n} records ({nbytes / n:.0f} B average frame), tcp loopback, 1 sender")
    print(f"{'':38} {'records/s':>10} {'CPU µs/record':>14}")
    print(f"{'raw ZeroMQ PUSH/PULL (receive only)':38} {raw_rate:>10,.0f} {raw_cpu:>14.1f}")
    print(f"{'BufferService (decode+assemble+store)':38} {svc_rate:>10,.0f} {svc_cpu:>14.1f}")
    print(f"{'ratio service / raw':38} {svc_rate / raw_rate:>10.2f} {svc_cpu / raw_cpu:>14.1f}")
    print(f"service state: {stats.groups_ready} groups ready, drops {stats.drops or '{}'}")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: CPU µs/record is")
    print(" the load-robust number; records/s depends on how much CPU the service got)")

    sizes = [s for s in (10**3, 10**4, 10**5, 10**6) if s <= args.max_groups]
    print(f"\n## Prioritized sampling (batch of {args.batch} groups, without replacement)")
    print(f"{'groups':>9} {'log2 n':>7} {'batch draw µs':>14} {'find µs':>8} {'update µs':>10}")
    for n_groups, draw, find, update in bench_sampling(sizes, args.batch, args.reps):
        print(
            f"{n_groups:>9,} {math.log2(n_groups):>7.1f} {draw:>14.1f} {find:>8.2f} {update:>10.2f}"
        )


if __name__ == "__main__":
    main()

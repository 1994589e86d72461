"""Control-plane latency under load: how fast the buffer answers 64 clients while data flows.

    .venv/bin/python -m bench.bench_control_latency                 # ~30 s on 2 cores
    .venv/bin/python -m bench.bench_control_latency --clients 16 --seconds 5

The real BufferService runs in this process (its own thread, ZeroMQ over tcp loopback).
`--clients` client threads each send a StatsRequest or a CreditRequest (alternating) in a
loop through the real `BufferClient`, while a separate process pushes encoded step records
at full speed into the data socket. Printed: requests answered, timeouts (each a retry), and
the reply latency's p50 / p99 / max in milliseconds — the baseline is the same requests with
no data flowing, measured in the same run, so the ratio shows what ingestion costs control.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import threading
import time

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport

GROUP = 2  # episodes per group (AlgorithmConfig.group_size below)


def _push(endpoint: str, control_endpoint: str, stop_at: float) -> None:
    """Push complete groups (one step + an end per episode) as the pipe takes them,
    under credits of 1,000 groups at a time (the buffer refuses groups it never granted)."""
    transport = ZmqTransport()
    pusher = transport.pusher(endpoint)
    credits = BufferClient(transport, control_endpoint, "actor", "load")
    group_ids: list[str] = []
    n = 0
    while time.monotonic() < stop_at:
        if not group_ids:
            group_ids = credits.request_credits(1000).group_ids
            if not group_ids:
                time.sleep(0.01)
                continue
        gid = group_ids.pop()
        for e in range(GROUP):
            eid = f"{gid}-{e}"
            step = m.StepRecord(eid, gid, "t", "load", "bench", 0, m.TokenIds(list(range(128))),
                                m.TokenIds(list(range(32))), m.LogProbs([-0.5] * 32),
                                policy_version=0, done=True)
            end = m.EpisodeEnd(eid, gid, "t", "load", "bench", 1, float(e), "ok", GROUP)
            pusher.send([m.encode(step)], timeout_ms=100)
            pusher.send([m.encode(end)], timeout_ms=100)
        n += 1
    credits.close()
    pusher.close()
    transport.close()


def _clients(endpoint: str, n: int, seconds: float) -> tuple[list[float], int]:
    """Latencies (s) of every answered request and the number of timeouts, over `n` threads."""
    latencies: list[float] = []
    timeouts = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def run(i: int) -> None:
        transport = ZmqTransport()
        client = BufferClient(transport, endpoint, "actor", f"c{i}", timeout_s=2.0)
        client.connect()
        mine: list[float] = []
        k = 0
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            client.stats() if k % 2 else client.request_credits(1)
            mine.append(time.perf_counter() - t0)
            k += 1
        with lock:
            latencies.extend(mine)
            timeouts[0] += client.timeouts
        client.close()
        transport.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, timeouts[0]


def _summary(label: str, lat: list[float], timeouts: int) -> float:
    lat = sorted(lat)
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(f"{label:>14}: {len(lat):6d} replies, {timeouts} timeouts, p50 "
          f"{statistics.median(lat) * 1e3:7.2f} ms, p99 {p99 * 1e3:7.2f} ms, "
          f"max {lat[-1] * 1e3:7.2f} ms")
    return p99


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    transport = ZmqTransport()
    # Credits never bind: the load is as the pipe allows, with no wait for a grant.
    cfg = BufferConfig(gc_freeze=False, snapshot_interval_s=0, max_staleness=1_000_000,
                       spi_tolerance=1e7)
    service = BufferService(cfg, AlgorithmConfig(group_size=GROUP), transport)
    service.start()
    try:
        quiet = _clients(service.control_endpoint, args.clients, args.seconds)
        pusher = mp.get_context("spawn").Process(
            target=_push, args=(service.data_endpoint, service.control_endpoint,
                                time.monotonic() + args.seconds + 5)
        )
        pusher.start()
        time.sleep(2.0)  # the pusher's interpreter starts and the data is flowing
        loaded = _clients(service.control_endpoint, args.clients, args.seconds)
        pusher.join()
        records = service.metrics()
    finally:
        service.stop()
        transport.close()
    print(f"{args.clients} clients, {args.seconds:.0f} s each phase; "
          f"{records.ingest_records_per_s:.0f} records/s ingested at the end of the loaded phase")
    base = _summary("no data", *quiet)
    load = _summary("data flowing", *loaded)
    print(f"p99 under load / p99 quiet: {load / base:.2f}x")


if __name__ == "__main__":
    main()

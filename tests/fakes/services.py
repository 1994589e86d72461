"""The real buffer service for tests (in-process, or a subprocess to SIGKILL), run configs and
a waiting helper.

Tests never re-implement the buffer's side of the wire: whatever grants credits, answers a
handshake or serves samples is the real `BufferService`, over whichever transport the test
uses (`InProcTransport`, or ZeroMQ on loopback).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig, RunConfig, config_from_dict
from agent_r1_async.wire.transport import Transport

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ALGO = AlgorithmConfig(group_size=2, batch_groups=1)
"""Groups of two episodes, one group per batch: the smallest setting every buffer test uses."""

_TEST_BUFFER: dict[str, Any] = {
    "spi_tolerance": 1e6,  # the rate limiter never binds unless a test asks for it
    "snapshot_interval_s": 0.0,  # snapshots only where a test gives a snapshot_dir
    "gc_freeze": False,  # the test process keeps its cyclic GC
}


def buffer_service(
    transport: Transport,
    *,
    algo: AlgorithmConfig = ALGO,
    clock: Callable[[], float] | None = None,
    snapshot_dir: str | None = None,
    start: bool = False,
    bounds: RecordBounds | None = None,
    **buffer: Any,
) -> BufferService:
    """The real BufferService on `transport`, with test defaults (`_TEST_BUFFER`) under
    `buffer.*` overrides, checking records against `bounds` (None: only the group size).
    `start=True` serves in its thread; otherwise a test drives the loop's parts itself
    (`_drain_data`, `_handle`). Stop it with `.stop()`."""
    cfg = BufferConfig(**{**_TEST_BUFFER, **buffer})
    kw: dict[str, Any] = {"snapshot_dir": snapshot_dir, "bounds": bounds}
    if clock is not None:
        kw["clock"] = clock
    service = BufferService(cfg, algo, transport, **kw)
    if start:
        service.start()
    return service


def push_records(transport: Transport, endpoint: str, records: Any) -> None:
    """Send each record as its own data frame to `endpoint` (each send must be taken)."""
    from agent_r1_async.wire import messages as m

    pusher = transport.pusher(endpoint)
    try:
        for r in records:
            assert pusher.send([m.encode(r)], timeout_ms=2000)
    finally:
        pusher.close()


def granted(transport: Transport, control_endpoint: str, n: int, actor_id: str = "a0") -> list[str]:
    """`n` group ids granted to `actor_id` by the real service (the buffer refuses records of
    groups it never granted)."""
    from agent_r1_async.wire.buffer_client import BufferClient

    client = BufferClient(transport, control_endpoint, "actor", actor_id, timeout_s=5.0)
    try:
        ids = client.request_credits(n).group_ids
    finally:
        client.close()
    assert len(ids) == n, f"{len(ids)} of {n} credits granted"
    return ids


def actor_config(backend: str, **engine: object) -> RunConfig:
    """A small actor run on the tiny model: groups of 2, 2 groups in flight, 8 new tokens."""
    return config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": backend, "dtype": "float32", "max_new_tokens": 8,
                   "max_concurrent_requests": 16, "kv_cache_gb": 1, **engine},
        "env": {"name": "arithmetic", "max_turns": 2, "step_timeout_s": 30},
        "actors": {"groups_in_flight": 2, "stats_interval_s": 0.5},
        "algorithm": {"group_size": 2},
        "buffer": {"gc_freeze": False, "snapshot_interval_s": 0.0},
    })


def wait_for(pred: Callable[[], bool], timeout_s: float = 5.0, what: str = "a condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


_BUFFER_MAIN = """
import sys, threading, msgspec
from agent_r1_async.buffers.service import BufferService
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.zmq import ZmqTransport
buf = msgspec.json.decode(sys.argv[1].encode(), type=BufferConfig)
algo = msgspec.json.decode(sys.argv[2].encode(), type=AlgorithmConfig)
service = BufferService(buf, algo, ZmqTransport(), sys.argv[3], sys.argv[4], snapshot_dir=sys.argv[5])
print("ready", service.restored, flush=True)
service.serve_forever(threading.Event())
"""


def start_buffer_process(
    buf: BufferConfig, algo: AlgorithmConfig, data_ep: str, control_ep: str, snapshot_dir: str
) -> subprocess.Popen:
    """A BufferService in its own process on fixed endpoints; returns once it has bound."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUFFER_MAIN, msgspec.json.encode(buf).decode(),
         msgspec.json.encode(algo).decode(), data_ep, control_ep, snapshot_dir],
        stdout=subprocess.PIPE, cwd=REPO, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready"), f"buffer process did not start: {line!r}"
    return proc


def free_tcp_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"

"""The buffer service: a ZeroMQ PULL for data records and a ROUTER for control requests.

Single-threaded event loop (one thread owns both sockets and the `EpisodeBuffer`):

    wait on both sockets (the transport's poller; <= 50 ms, or the next pending deadline)
    drain data messages for <= 5 ms (and <= 2,000 records) -> unpack_data -> buffer.ingest
    drain up to 100 control frames  -> decode_control -> reply (or park a SampleRequest)
    every 0.2 s: buffer.tick() (timeouts); gc.freeze() (if buffer.gc_freeze)
    each pass:   answer parked sample requests that can be served now, or whose deadline
                 passed (ready=False)
    every snapshot_interval_s, and at stop: atomic snapshot

The data drain is bounded by time as count, so a data pipe that never empties cannot
starve the control socket: a control request waits at most about one data slice (5 ms) plus
the control frames ahead of it (`bench/bench_control_latency.py` measures it with 64 clients).
A SampleRequest that cannot be served yet is parked, never blocking ingestion; it is answered
as soon as enough groups are ready or at its deadline. A malformed message on either socket is
counted once (`drops["malformed"]`; a `DataBatch` with one bad item is one malformed frame),
answered with `ErrorReply` on the control socket, and the loop goes on; a decoded record or
request that still fails is counted (`ingest_error`, `request_error`) instead of stopping the
loop. `buffer.records` counts records (the items of a DataBatch each), not frames. A
SampleRequest's wait is finite and capped (`_MAX_PARK_S`), and each peer has at most one
parked request. Replies go out with ROUTER_MANDATORY: a reply to a peer that left is dropped.

Who may send what (wire/roles.py): with CurveZMQ each message carries its sender's
authenticated identity (the sockets' `.user_id`). VersionUpdate and SampleRequest come from the
learner's key only, a CreditRequest only from the actor it names, records and ActorStats only
from the actor they name; anything else is answered with `ErrorReply` and counted
(`drops["unauthorized/<request>"]`, `invalid_record/identity`, `invalid_stats/identity`).
Records of groups never granted to their actor are refused (`invalid_record/ungranted`) in
every mode and never take an admission credit.

The thread never dies silently: each part of the loop (wait, data, control, tick, parked,
snapshot) runs under a guard that counts an exception (`drops["loop_error/<part>"]`) and logs
it with its traceback; a part that fails `_MAX_CONSECUTIVE_ERRORS` times in a row is broken
for good, and then the service stops (final snapshot) and calls `on_fatal` (the buffer's
host exits its process, which supervision sees); `failure` holds the exception.

The launcher calls `reclaim(actor_id)` (through Ray, under the same lock as the loop) when it
replaces an actor's process: its credits and unfinished episodes come back at once
(`EpisodeBuffer.reclaim`). `metrics()` adds what the learner's parked SampleRequest waits
for (`sample_waiting`) to the buffer's stats; a `Hello` is answered with the learner version.

Run: `BufferService(cfg.buffer, cfg.algorithm, ZmqTransport(), bounds=bounds).start()`, with
the run's `RecordBounds` built at launch (`RecordBounds.from_config`); actors PUSH
`messages.encode(record)` (or `messages.encode_data_batch` of several encoded records) to
`.data_endpoint`; learners and actors use `BufferClient` on `.control_endpoint`.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.snapshot import SnapshotReport, restore_snapshot, save_snapshot
from agent_r1_async.buffers.state import BufferState
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire import roles
from agent_r1_async.wire.transport import Transport

log = logging.getLogger(__name__)

_DATA_BURST = 2000
_DATA_SLICE_S = 0.005  # longest the loop drains data before it serves control again
_CONTROL_BURST = 100
_TICK_S = 0.2
_IDLE_WAIT_MS = 50
_MAX_PARK_S = 3600.0  # longest a SampleRequest may wait; the learner asks again after it
_MAX_PARKED = 256  # parked requests at once (one per peer identity; bounds a flood)
_MAX_CONSECUTIVE_ERRORS = 50  # a part failing this often in a row is broken, not unlucky


class _Broken(Exception):
    """A loop part failed _MAX_CONSECUTIVE_ERRORS times in a row."""


@dataclass
class _Parked:
    peer: bytes
    request: m.SampleRequest
    deadline: float


class BufferService:
    def __init__(
        self,
        cfg: BufferConfig,
        algo: AlgorithmConfig,
        transport: Transport,
        data_endpoint: str = "tcp://127.0.0.1:0",
        control_endpoint: str = "tcp://127.0.0.1:0",
        snapshot_dir: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        fresh_actors: bool = False,
        on_fatal: Callable[[BaseException], None] | None = None,
        bounds: RecordBounds | None = None,
    ) -> None:
        """`fresh_actors`: the actors of the restored snapshot are gone (a relaunch), so their
        open episodes and credits are released at once instead of after their timeouts.
        `on_fatal`: called (from the service thread, after shutdown) when the loop is broken
        for good; the default only logs. `bounds`: what records are checked against
        (`EpisodeBuffer`; the launch passes `RecordBounds.from_config`)."""
        self.cfg = cfg
        self.on_fatal = on_fatal
        self.failure: BaseException | None = None
        self._errors_in_a_row: dict[str, int] = {}
        self.buffer = EpisodeBuffer(cfg, algo, clock, bounds=bounds)
        self.snapshot_dir = snapshot_dir
        self.snapshot_report: SnapshotReport | None = None
        """What the start restored from `snapshot_dir` and what it skipped as corrupt
        (buffers/snapshot.py; `.line()` is the launch's console line)."""
        if snapshot_dir is not None:

            def restore(state: BufferState) -> None:  # a fresh buffer per try
                buffer = EpisodeBuffer(cfg, algo, clock, bounds=bounds)
                buffer.restore(state)
                if fresh_actors:
                    buffer.orphan_all()
                self.buffer = buffer

            self.snapshot_report = restore_snapshot(snapshot_dir, restore)
            if self.snapshot_report.line():
                log.warning("%s", self.snapshot_report.line())
        self.restored = bool(self.snapshot_report and self.snapshot_report.restored_from)
        self._clock = clock
        self._puller = transport.puller(data_endpoint, max_message_bytes=cfg.max_frame_bytes)
        self._server = transport.server(control_endpoint, max_message_bytes=cfg.max_frame_bytes)
        self.data_endpoint: str = self._puller.endpoint
        self.control_endpoint: str = self._server.endpoint
        self._poller = transport.poller([self._puller, self._server])
        self._parked: list[_Parked] = []
        self._lock = threading.Lock()  # guards the buffer between the loop and metrics()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._rate = 0.0
        self._rate_mark = (clock(), 0)
        self._data_frames = self._data_items = 0  # decoded data frames and their messages

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (the sockets then belong to that thread)."""
        self._thread = threading.Thread(
            target=self.serve_forever, args=(self._stop,), name="buffer-service", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        elif not self._closed:
            self._shutdown()

    def serve_forever(self, stop: threading.Event) -> None:
        next_tick = next_snapshot = self._clock()
        if self.cfg.snapshot_interval_s > 0:
            next_snapshot += self.cfg.snapshot_interval_s
        try:
            while not stop.is_set() and not self._stop.is_set():
                self._guarded("wait", self._wait)
                with self._lock:
                    self._guarded("data", self._drain_data)
                    self._guarded("control", self._drain_control)
                    now = self._clock()
                    if now >= next_tick:
                        next_tick = now + _TICK_S
                        self._guarded("tick", self._tick, now)
                    self._guarded("parked", self._serve_parked, now)
                    if (
                        self.snapshot_dir
                        and self.cfg.snapshot_interval_s > 0
                        and now >= next_snapshot
                    ):
                        next_snapshot = now + self.cfg.snapshot_interval_s
                        self._guarded("snapshot", self._save_snapshot)
        except _Broken as e:
            self.failure = e.__cause__ or e
        finally:
            self._shutdown()
        if self.failure is not None:
            log.critical("buffer: service loop stopped: %s", self.failure)
            if self.on_fatal is not None:
                self.on_fatal(self.failure)

    def join(self) -> None:
        """Block until the service thread ends (stopped, or its loop broken for good)."""
        if self._thread is not None:
            self._thread.join()

    def alive(self) -> bool:
        """The service thread runs and its loop is not broken."""
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    def _guarded(self, part: str, fn: Callable[..., object], *args: object) -> None:
        """Run one loop part; an exception is counted and logged, never a dead thread."""
        try:
            fn(*args)
        except Exception as e:
            self.buffer.drops[f"loop_error/{part}"] += 1
            n = self._errors_in_a_row[part] = self._errors_in_a_row.get(part, 0) + 1
            log.exception("buffer: loop part %r failed (%d in a row)", part, n)
            if n >= _MAX_CONSECUTIVE_ERRORS:
                raise _Broken(f"loop part {part!r} failed {n} times in a row") from e
        else:
            self._errors_in_a_row[part] = 0

    def _wait(self) -> None:
        self._poller.wait(self._wait_ms())

    def _tick(self, now: float) -> None:
        if self.cfg.gc_freeze:
            # Stored records are acyclic (freed by refcount); keeping millions of their lists
            # out of every full GC scan doubles ingest speed.
            gc.freeze()
        self.buffer.tick()
        self._update_rate(now)

    def _save_snapshot(self) -> str:
        """Write a snapshot of the buffer (the caller holds the loop or the lock); its path."""
        assert self.snapshot_dir is not None
        path = save_snapshot(self.snapshot_dir, self.buffer.state())
        self.buffer.saved()
        return path

    def _shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for parked in self._parked:  # tell waiting learners instead of letting them time out
                self._reply(parked.peer, self._not_ready(parked.request, "buffer stopping"))
            self._parked.clear()
            if self.snapshot_dir:
                self._save_snapshot()
            self._puller.close()
            self._server.close()
            if self.cfg.gc_freeze:
                gc.unfreeze()  # hand everything back to the cyclic GC

    def metrics(self) -> m.BufferStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> m.BufferStats:
        waiting = max((p.request.num_groups for p in self._parked), default=0)
        return self.buffer.stats(self._rate, self._records_per_frame(), waiting)

    def reclaim(self, actor_id: str) -> dict[str, int]:
        """Everything `actor_id` holds comes back now (`EpisodeBuffer.reclaim_report`): the
        launcher replaces that actor's process. {"credits": n, "episodes": n} (its unfinished
        episodes) and what was discarded (`lengths.Loss.to_counts`: `discarded` episodes,
        their `steps` and `tokens`, `le_<b>` episodes by length bucket)."""
        with self._lock:
            credits, episodes, loss = self.buffer.reclaim_report(actor_id)
        return {"credits": credits, "episodes": episodes, **loss.to_counts()}

    def snapshot_now(self) -> str | None:
        """Write a snapshot now (the launcher asks on every learner checkpoint, and before the
        final one, so that a full disk there cannot cost the buffer's state); its path."""
        if not self.snapshot_dir:
            return None
        with self._lock:
            if self._closed:
                return None
            return self._save_snapshot()

    def set_version(self, version: int) -> None:
        """The learner's version, from the launcher (a buffer restarted from an older snapshot
        learns it before the learner's next request)."""
        with self._lock:
            self.buffer.set_version(version)

    # ---- the loop's parts ---------------------------------------------------------------

    def _wait_ms(self) -> int:
        if not self._parked:
            return _IDLE_WAIT_MS
        soonest = min(p.deadline for p in self._parked) - self._clock()
        return max(0, min(_IDLE_WAIT_MS, int(soonest * 1000) + 1))

    def _drain_data(self) -> None:
        budget = _DATA_BURST  # records (a malformed message counts as one)
        deadline = time.perf_counter() + _DATA_SLICE_S
        while budget > 0 and time.perf_counter() < deadline:
            frames = self._puller.recv(timeout_ms=0)
            if frames is None:
                return
            try:
                msgs = m.unpack_data(frames)  # a plain message or a DataBatch's items
            except m.WireError:
                self.buffer.drops["malformed"] += 1
                budget -= 1
                continue
            budget -= len(msgs)
            sender = self._puller.user_id  # who authenticated the message (CurveZMQ), or None
            self._data_frames += 1
            self._data_items += len(msgs)
            for msg in msgs:
                try:
                    self.buffer.ingest(msg, sender)
                except Exception as e:  # a record no check foresaw must not stop the service
                    self.buffer.drops["ingest_error"] += 1
                    log.error("buffer: record refused: %s: %s", type(e).__name__, e)

    def _drain_control(self) -> None:
        for _ in range(_CONTROL_BURST):
            got = self._server.recv(timeout_ms=0)
            if got is None:
                return
            peer, frames = got
            try:
                reply = self._handle(peer, frames, self._server.user_id)
            except Exception as e:  # a request no check foresaw must not stop the service
                self.buffer.drops["request_error"] += 1
                log.error("buffer: request failed: %s: %s", type(e).__name__, e)
                reply = m.ErrorReply(f"the buffer failed on this request: {type(e).__name__}")
            if reply is not None:
                self._reply(peer, reply)

    def _handle(
        self, peer: bytes, frames: list[bytes], sender: str | None = None
    ) -> m.ControlMessage | None:
        """The reply to one control request (None when the request was parked). `sender`:
        the peer's authenticated identity (wire/roles.py), None without CurveZMQ."""
        try:
            if len(frames) != 1:
                raise m.WireError(f"expected 1 frame, got {len(frames)}")
            req = m.decode_control(frames[0])
        except m.WireError as e:
            self.buffer.drops["malformed"] += 1
            return m.ErrorReply(f"malformed control frame: {e}")
        denied = self._denied(req, sender)
        if denied:
            self.buffer.drops["unauthorized"] += 1
            self.buffer.drops[f"unauthorized/{type(req).__name__}"] += 1
            return m.ErrorReply(f"{type(req).__name__} from {sender!r}: {denied}")
        if isinstance(req, m.Hello):
            return m.check_hello(req, self.buffer.version)
        if isinstance(req, m.CreditRequest):
            return self.buffer.grant(req.actor_id, max(0, req.max_groups), req.held)
        if isinstance(req, m.VersionUpdate):
            self.buffer.set_version(req.version)
            return m.VersionAck(self.buffer.version)
        if isinstance(req, m.StatsRequest):
            return self._stats()
        if isinstance(req, m.SampleRequest):
            return self._sample(peer, req)
        self.buffer.drops["unexpected_message"] += 1
        return m.ErrorReply(f"the buffer does not serve {type(req).__name__} requests")

    @staticmethod
    def _denied(req: m.ControlMessage, sender: str | None) -> str:
        """Why `sender` may not make this request ("" if it may). A stranger's
        VersionUpdate(10**9) would stall the run for good, and its SampleRequest would take
        the learner's groups."""
        if isinstance(req, (m.VersionUpdate, m.SampleRequest)) and roles.learner_only(sender):
            return "only the learner may send it"
        if isinstance(req, m.CreditRequest) and roles.not_this_actor(sender, req.actor_id):
            return f"credits for {req.actor_id!r} go to that actor only"
        if isinstance(req, m.Hello) and sender is not None and (
                (req.role == "learner") != (sender == roles.LEARNER)):
            return f"this key is not a {req.role}'s"
        return ""

    def _sample(self, peer: bytes, req: m.SampleRequest) -> m.ControlMessage | None:
        if req.num_groups < 1 or not (math.isfinite(req.timeout_s) and req.timeout_s >= 0):
            self.buffer.drops["invalid_request"] += 1
            return m.ErrorReply(
                f"SampleRequest needs num_groups >= 1 and a finite timeout_s >= 0, got "
                f"num_groups={req.num_groups}, timeout_s={req.timeout_s}"
            )
        batch, why = self.buffer.try_sample(req.num_groups, req.learner_version,
                                            req.failed_episodes)
        if batch is not None:
            return batch
        if req.timeout_s > 0:
            # A DEALER asks one thing at a time: a peer's new request replaces its parked one
            # (whose answer it no longer reads), so a flood from one peer parks one request.
            self._parked = [p for p in self._parked if p.peer != peer]
            if len(self._parked) >= _MAX_PARKED:
                self.buffer.drops["invalid_request"] += 1
                return m.ErrorReply(f"{_MAX_PARKED} sample requests are waiting already")
            wait = min(req.timeout_s, _MAX_PARK_S)  # a finite deadline for _wait_ms
            self._parked.append(_Parked(peer, req, self._clock() + wait))
            return None
        return self._not_ready(req, why)

    def _serve_parked(self, now: float) -> None:
        still: list[_Parked] = []
        for parked in self._parked:
            req = parked.request
            batch, why = self.buffer.try_sample(req.num_groups, req.learner_version,
                                                req.failed_episodes)
            if batch is not None:
                self._reply(parked.peer, batch)
            elif now >= parked.deadline:
                self._reply(parked.peer, self._not_ready(req, why))
            else:
                still.append(parked)
        self._parked = still

    def _not_ready(self, req: m.SampleRequest, why: str) -> m.SampleBatch:
        return m.SampleBatch([], [], self.buffer.version, ready=False, reason=why)

    def _reply(self, peer: bytes, msg: m.ControlMessage) -> None:
        if not self._server.reply(peer, [m.encode(msg)]):
            self.buffer.drops["reply_undeliverable"] += 1

    def _records_per_frame(self) -> float:
        """Mean data messages per decoded frame since start (actors coalesce a loop turn's
        records into one DataBatch frame: this is how many a real run gets)."""
        return self._data_items / self._data_frames if self._data_frames else 0.0

    def _update_rate(self, now: float) -> None:
        t0, n0 = self._rate_mark
        if now - t0 >= 1.0:
            self._rate = (self.buffer.records - n0) / (now - t0)
            self._rate_mark = (now, self.buffer.records)


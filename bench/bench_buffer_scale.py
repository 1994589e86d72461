"""The buffer at scale, simulated: 10 … 1,000 actors, each with its own CurveZMQ identity.

    nice -n 5 .venv/bin/python -m bench.bench_buffer_scale                  # ~2 min on 2 cores
    nice -n 5 .venv/bin/python -m bench.bench_buffer_scale --actors 10,100 --seconds 5   # quick
    nice -n 5 .venv/bin/python -m bench.bench_buffer_scale --actors 64 --steps 32 \
        --prompt-tokens 512 --action-tokens 512 --obs-tokens 0        # long episodes, 40 KB records

Part 1, per actor count N: a fresh real `BufferService` in its own process, as a launch runs
it: tcp loopback, CurveZMQ on with the run's keys (`RunKeys.generate(["learner", "actor-0",
...])`, each process given its own through `keys_for`), the launch's `RecordBounds`,
snapshots off. N simulated actors live in `--workers` processes, each actor with its own key
pair, its own PUSH socket (the real `ZmqPusher`) and its own DEALER for control (an asyncio
twin of `BufferClient`: its frames, identity and timeouts, one request at a time). An actor
runs `actors/actor.py`'s loop without an engine: Hello; an ActorStats first and then every
`--stats-interval-s`; CreditRequests for its free group slots (`--groups-in-flight`), backing
off 0.05 → 1 s when denied; per granted group `--group-size` episodes of `--steps` steps. A
step is a StepRecord as `actors/rollout.py` builds it: the step's *full* context (prompt plus
every earlier action and observation: 128, 256, 384, 512 tokens by default), 32 action tokens
and their log-probs; an EpisodeEnd follows the last. Steps fall due on one timer heap per
worker (a coroutine per episode costs the 2 shared cores more than the buffer does); an
actor's messages due in one 5 ms tick leave as one frame (`BatchEmitter.frame`), and a frame
the full pipe refuses waits, in order. An actor makes `--steps-per-actor-s` steps a second
while its slots are full, so the target load is N × rate × (steps + 1) / steps records/s
plus N / stats_interval reports. A learner thread samples with the real `BufferClient` under
the learner's key (timeout_s=0, so its latency is the buffer's answer, not the wait for
data; not ready: 50 ms and again, as `learner/loop.py`) and sets version + 1 after each
batch, so staleness admission runs for real. The batch is a quarter of the groups in flight
(the update rate is then the same at every N) and `buffer.max_staleness` what the groups in
flight need plus 2.

Printed per N: target, sent and ingested records/s (the service's own `buffer.records` over
the window); CPU µs per ingested record of the service thread and of the whole buffer
process (libzmq I/O thread and CurveZMQ included), the service thread's CPU and its wait for
a CPU (schedstat) as shares of the window; credit and sample latency p50 / p99 (client side);
the buffer's RSS idle, with all 2N connections authenticated, and its peak; fds; records and
groups refused or dropped (a stale group counts, a group trained and evicted does not); Jain's
index of groups granted per actor. The baseline is the sweep's first row: each row's ingested
share of its target over the baseline's, credit and sample p99 over the baseline's; the
saturation point is the first N that ingests under 90 % of what its actors sent or of the
baseline's share, or whose credit p99 passes 10× the baseline's and 100 ms.
Part 2 times one `EpisodeBuffer.grant` (a CreditRequest's work) and one `tick` with each
row's groups in flight assembling. Each row prints the buffer's pid, for a sampling
profiler (`py-spy record -p PID --nonblocking`). The soft fd limit is raised to the hard one
when it is too low for 2N sockets (the row's line says so).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import math
import multiprocessing as mp
import os
import random
import resource
import statistics
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import zmq
import zmq.asyncio

from agent_r1_async.actors.emitter import BatchEmitter
from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.lengths import WIRE_PREFIX
from agent_r1_async.buffers.service import BufferService
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.curve import CurveKeys, RunKeys, keys_for
from agent_r1_async.wire.roles import LEARNER
from agent_r1_async.wire.zmq import ZmqTransport

VOCAB = 49152  # smollm2-135m-instruct, the default model: the bounds' vocab_size
IDLE_S = 0.05  # the actor's idle wait and first credit backoff (actors/actor.py)
MAX_BACKOFF_S = 1.0
SATURATED_SHARE = 0.9  # ingested below this share of the offered load: saturated
P99_BLOWUP = 10.0  # credit p99 above this many times the baseline's (and P99_FLOOR_S)
P99_FLOOR_S = 0.1


# ---- pure helpers (tests/unit/bench/test_bench_buffer_scale.py) -------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile as the benches take it: sorted[int(q · (n − 1))]; nan if empty."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def offered_records_per_s(
    actors: int, steps_per_actor_s: float, steps: int, stats_interval_s: float
) -> float:
    """Records/s N actors offer: each step a StepRecord, each episode of `steps` steps one
    EpisodeEnd more, and one ActorStats per actor every `stats_interval_s`."""
    if steps < 1 or stats_interval_s <= 0:
        raise ValueError(f"need steps >= 1 and stats_interval_s > 0, got {steps}, "
                         f"{stats_interval_s}")
    return actors * (steps_per_actor_s * (steps + 1) / steps + 1.0 / stats_interval_s)


def auto_batch_groups(actors: int, groups_in_flight: int) -> int:
    """The learner's batch: a quarter of the groups in flight, at least 4."""
    return max(4, math.ceil(actors * groups_in_flight / 4))


def auto_max_staleness(actors: int, groups_in_flight: int, batch_groups: int) -> int:
    """Versions the groups in flight span (each batch is one version) plus 2: admission
    (`(max_staleness + 1) × batch_groups` ≥ in flight + one ready batch) then never binds
    in the steady state, only when the learner falls behind."""
    return math.ceil(actors * groups_in_flight / batch_groups) + 2


def context_tokens(step: int, prompt: int, action: int, observation: int) -> int:
    """Tokens of step `step`'s context under the `full` builder: the prompt and every earlier
    step's action and observation (the StepRecord carries all of it, not a delta)."""
    return prompt + step * (action + observation)


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n · Σx²): 1 when all equal, 1/n when one gets all."""
    if not values:
        return math.nan
    sq = sum(v * v for v in values)
    return (sum(values) ** 2) / (len(values) * sq) if sq else 1.0


def saturation_point(
    rows: Sequence[tuple[int, float, float, float, float]],
    share: float = SATURATED_SHARE,
    blowup: float = P99_BLOWUP,
    floor_s: float = P99_FLOOR_S,
) -> tuple[int, str] | None:
    """The first (actors, why) of rows (actors, target/s, sent/s, ingested/s, credit p99 s),
    in sweep order, where the buffer ingested less than `share` of what the actors sent, or
    ingested less than `share` × the first row's share of the target load (the actors were
    held back: credits denied or slow), or whose credit p99 exceeds both `blowup` × the first
    row's and `floor_s`; None if no row did."""
    if not rows:
        return None
    _, base_target, _, base_ingested, base_p99 = rows[0]
    base_share = base_ingested / base_target if base_target > 0 else 0.0
    for actors, target, sent, ingested, p99 in rows:
        if sent > 0 and ingested < share * sent:
            return actors, f"ingested {ingested / sent:.2f} of what the actors sent"
        if target > 0 and ingested / target < share * base_share:
            return actors, (f"ingested {ingested / target:.2f} of the target load, "
                            f"the baseline {base_share:.2f}")
        if p99 > floor_s and p99 > blowup * base_p99:
            return actors, f"credit p99 {p99 / base_p99:.0f}× the baseline's"
    return None


# ---- the simulated fleet ----------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What every simulated actor does (module docstring)."""

    steps: int = 4
    group_size: int = 4
    groups_in_flight: int = 2
    prompt_tokens: int = 128
    action_tokens: int = 32
    obs_tokens: int = 96
    steps_per_actor_s: float = 10.0
    stats_interval_s: float = 5.0

    @property
    def step_interval_s(self) -> float:
        """Mean seconds between two steps of one episode: the actor's steps/s spread over
        its groups_in_flight × group_size concurrent episodes."""
        return self.groups_in_flight * self.group_size / self.steps_per_actor_s


def raise_fd_limit(need: int) -> str:
    """Raise the soft RLIMIT_NOFILE to the hard one when it is below `need`; a note if so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return ""
    new = max(need, soft) if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return f"raised the fd limit {soft} -> {new} (need ~{need})"


_R = TypeVar("_R")


class _Control:
    """An actor's control socket for asyncio: `BufferClient`'s frames, socket identity and
    keys, one request at a time; a request with no reply in `timeout_s` drops the socket
    (lazy pirate) and is sent again, `retries` times."""

    def __init__(self, actx: zmq.asyncio.Context, endpoint: str, peer_id: str,
                 curve: CurveKeys | None, timeout_s: float = 10.0, retries: int = 3) -> None:
        self._actx, self._endpoint, self._curve = actx, endpoint, curve
        self._identity = f"{peer_id}-{uuid.uuid4().hex[:8]}".encode()
        self.peer_id, self.timeout_s, self.retries = peer_id, timeout_s, retries
        self.timeouts = 0
        self._sock = self._open()

    def _open(self) -> zmq.asyncio.Socket:
        sock = self._actx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, self._identity)
        if self._curve is not None:
            sock.setsockopt(zmq.CURVE_SERVERKEY, self._curve.server_public)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self._curve.client_public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self._curve.client_secret)
        sock.connect(self._endpoint)
        return sock

    async def call(self, req: m.ControlMessage, reply_type: type[_R]) -> _R:
        frame = m.encode(req)
        for _ in range(self.retries + 1):
            await self._sock.send(frame)
            if await self._sock.poll(int(self.timeout_s * 1000)):  # POLLIN
                frames = await self._sock.recv_multipart()
                break
            self.timeouts += 1
            self._sock.close(linger=0)
            self._sock = self._open()
        else:
            raise TimeoutError(f"no reply to {type(req).__name__} ({self.retries + 1} tries)")
        reply = m.decode_control(frames[0])
        if isinstance(reply, m.ErrorReply):
            raise RuntimeError(f"buffer refused {type(req).__name__}: {reply.reason}")
        if not isinstance(reply, reply_type):
            raise RuntimeError(f"expected {reply_type.__name__}, got {type(reply).__name__}")
        return reply

    def close(self) -> None:
        self._sock.close(linger=0)


@dataclass
class _Tally:
    """One worker's measurements inside the window [t0, t1)."""

    credit_lat: list[float] = field(default_factory=list)
    denied: Counter[str] = field(default_factory=Counter)
    emitted: int = 0
    groups: dict[str, int] = field(default_factory=dict)  # actor -> groups granted
    errors: Counter[str] = field(default_factory=Counter)


@dataclass(eq=False, slots=True)
class _Group:
    group_id: str
    task_id: str
    left: int
    done: asyncio.Future[None]


@dataclass(eq=False, slots=True)
class _Episode:
    actor: _SimActor
    group: _Group
    episode_id: str
    t_start: float
    step: int = 0
    gen_s: float = 0.0


class _DataClock:
    """A worker's data plane: every episode's next step at its due time, from one heap
    (a coroutine and a timer per episode would cost the 2 shared cores more than the buffer
    does). An actor's messages due in one tick leave as one frame (`BatchEmitter.frame`: a
    message alone, several as a `DataBatch`), as the actor's emitter cuts a loop turn's; a frame
    the full pipe refuses waits in order and is retried at the next tick."""

    def __init__(self, shape: Shape, tally: _Tally, seed: int, tick_s: float = 0.005) -> None:
        self.shape, self.tally, self.tick_s = shape, tally, tick_s
        self.rng = random.Random(seed)
        self._heap: list[tuple[float, int, _Episode]] = []
        self._seq = itertools.count()
        self._dirty: dict[str, _SimActor] = {}
        self._blocked: set[_SimActor] = set()  # a frame refused by the full pipe waits
        self.t0 = self.t1 = math.inf

    def start_group(self, actor: _SimActor, group_id: str) -> asyncio.Future[None]:
        g = self.shape.group_size
        group = _Group(group_id, f"task-{self.rng.randrange(10**6):06d}", g,
                       asyncio.get_running_loop().create_future())
        now = time.monotonic()
        for _ in range(g):
            self._schedule(_Episode(actor, group, uuid.uuid4().hex, now), now)
        return group.done

    def _schedule(self, ep: _Episode, now: float) -> None:
        ep.gen_s = self.shape.step_interval_s * self.rng.uniform(0.5, 1.5)
        heapq.heappush(self._heap, (now + ep.gen_s, next(self._seq), ep))

    def emit(self, actor: _SimActor, msg: m.StepRecord | m.EpisodeEnd | m.ActorStats) -> None:
        actor.pending.append(m.encode(msg))
        self._dirty[actor.actor_id] = actor
        if self.t0 <= time.monotonic() < self.t1:
            self.tally.emitted += 1

    def blocked(self, actor: _SimActor) -> None:
        self._blocked.add(actor)

    async def run(self, t1: float) -> None:
        s, heap = self.shape, self._heap
        while (now := time.monotonic()) < t1:
            while heap and heap[0][0] <= now:
                _, _, ep = heapq.heappop(heap)
                a, i = ep.actor, ep.step
                self.emit(a, m.StepRecord(
                    ep.episode_id, ep.group.group_id, ep.group.task_id, a.actor_id, "bench", i,
                    a.contexts[i], a.action, a.logprobs, policy_version=a.version,
                    done=i == s.steps - 1, gen_time_s=ep.gen_s, env_time_s=0.001,
                    created_at=time.time()))
                a.tokens += s.action_tokens
                ep.step += 1
                if ep.step < s.steps:
                    self._schedule(ep, now)
                    continue
                a.done += 1
                self.emit(a, m.EpisodeEnd(
                    ep.episode_id, ep.group.group_id, ep.group.task_id, a.actor_id, "bench",
                    s.steps, self.rng.random(), "ok", s.group_size, metrics={"success": 1.0},
                    wall_time_s=now - ep.t_start, created_at=time.time()))
                ep.group.left -= 1
                if ep.group.left == 0:
                    ep.group.done.set_result(None)
            dirty, self._dirty = self._dirty, {}
            for a in dirty.values():
                a.flush()
            for a in list(self._blocked):
                if a.pump():
                    self._blocked.discard(a)
            nxt = heap[0][0] if heap else math.inf
            await asyncio.sleep(max(0.0, min(nxt - time.monotonic(), self.tick_s)))


class _SimActor:
    """One actor's loop (actors/actor.py); its episodes step on the worker's `_DataClock`
    where the engine would generate."""

    def __init__(self, actor_id: str, shape: Shape, pusher: Any, control: _Control,
                 payload: tuple[list[m.TokenIds], m.TokenIds, m.LogProbs], clock: _DataClock,
                 tally: _Tally, seed: int) -> None:
        self.actor_id, self.shape, self.control, self.tally = actor_id, shape, control, tally
        self.pusher, self.clock = pusher, clock
        self.contexts, self.action, self.logprobs = payload
        self.rng = random.Random(seed)
        self.version = 0
        self.t0 = self.t1 = math.inf
        self.started = time.monotonic()
        self.done = self.tokens = 0
        self.pending: list[bytes] = []  # encoded messages of the next frame
        self.out: deque[bytes] = deque()  # frames the full pipe refused, in order
        self._running: set[asyncio.Future[None]] = set()
        tally.groups[actor_id] = 0

    def flush(self) -> None:
        """Cut the pending messages into one frame and hand frames to the pipe in order."""
        if self.pending:
            self.out.append(BatchEmitter.frame(self.pending))
            self.pending = []
        if not self.pump():
            self.clock.blocked(self)

    def pump(self) -> bool:
        """Send waiting frames until the pipe refuses one; True when none waits."""
        while self.out:
            if not self.pusher.send([self.out[0]], timeout_ms=0):
                return False
            self.out.popleft()
        return True

    def report(self, now: float) -> m.ActorStats:
        up = max(now - self.started, 1e-3)
        return m.ActorStats(
            self.actor_id, time.time(), self.version, self.tokens / up, self.done / up,
            0.0, 0.0, len(self._running) * self.shape.group_size, self.done, 0,
            tokens_total=self.tokens, progress_age_s=0.0,
        )

    async def run(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        await asyncio.sleep(self.rng.uniform(0, self.shape.step_interval_s))  # fleet not in step
        next_stats = time.monotonic()  # the first report before the first credit request
        backoff, next_credit = IDLE_S, 0.0
        while (now := time.monotonic()) < t1:
            if now >= next_stats:
                self.clock.emit(self, self.report(now))
                next_stats = now + self.shape.stats_interval_s
            free = self.shape.groups_in_flight - len(self._running)
            if free > 0 and now >= next_credit:
                granted = await self._credits(free, now)
                for gid in granted:
                    self._running.add(self.clock.start_group(self, gid))
                if len(granted) == free:
                    backoff, next_credit = IDLE_S, 0.0
                elif granted:  # partly granted: ask again at the next idle wake
                    backoff, next_credit = IDLE_S, time.monotonic() + IDLE_S
                else:
                    next_credit = time.monotonic() + backoff
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
            # Wake for a finished group, the next report or credit retry, or the end (the
            # real actor also polls its weight path every IDLE_S).
            free = self.shape.groups_in_flight - len(self._running)
            wake = min(next_stats, t1, next_credit if free > 0 else math.inf)
            timeout = max(0.0, wake - time.monotonic())
            if self._running:
                _, self._running = await asyncio.wait(
                    self._running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(timeout)

    async def _credits(self, want: int, now: float) -> list[str]:
        t = time.perf_counter()
        try:
            grant = await self.control.call(m.CreditRequest(self.actor_id, want), m.CreditGrant)
        except (TimeoutError, RuntimeError) as e:
            self.tally.errors[type(e).__name__] += 1
            return []
        dt = time.perf_counter() - t
        if self.t0 <= now < self.t1:
            self.tally.credit_lat.append(dt)
            self.tally.groups[self.actor_id] += grant.groups
            if grant.groups < want:
                self.tally.denied[grant.reason or "none"] += 1
        self.version = max(self.version, grant.learner_version)
        return grant.group_ids[:want]


def _payload(shape: Shape, seed: int) -> tuple[list[m.TokenIds], m.TokenIds, m.LogProbs]:
    """Token ids of each step's full context, one action and its log-probs (shared by every
    record of a worker: the buffer decodes its own copy of each)."""
    rng = random.Random(seed)
    longest = context_tokens(shape.steps - 1, shape.prompt_tokens, shape.action_tokens,
                             shape.obs_tokens)
    ids = [rng.randrange(VOCAB) for _ in range(longest)]
    contexts = [m.TokenIds(ids[: context_tokens(i, shape.prompt_tokens, shape.action_tokens,
                                                 shape.obs_tokens)])
                for i in range(shape.steps)]
    action = m.TokenIds([rng.randrange(VOCAB) for _ in range(shape.action_tokens)])
    logprobs = m.LogProbs([-rng.random() for _ in range(shape.action_tokens)])
    return contexts, action, logprobs


def _worker(index: int, actor_ids: list[str], keys: RunKeys, data_ep: str, control_ep: str,
            shape: Shape, conn: Connection) -> None:
    """A process hosting `actor_ids` on one asyncio loop: connect all, say ready, wait for
    the window (t0, t1), run, send back the tally."""
    raise_fd_limit(4 * len(actor_ids) + 256)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 2 * len(actor_ids) + 64)
    actx = zmq.asyncio.Context.shadow(ctx.underlying)
    try:
        asyncio.run(_worker_main(index, actor_ids, keys, data_ep, control_ep, shape, conn,
                                 ctx, actx))
    finally:
        ctx.destroy(linger=0)


async def _worker_main(index: int, actor_ids: list[str], keys: RunKeys, data_ep: str,
                       control_ep: str, shape: Shape, conn: Connection,
                       ctx: zmq.Context[zmq.Socket[bytes]], actx: zmq.asyncio.Context) -> None:
    tally = _Tally()
    payload = _payload(shape, index)
    clock = _DataClock(shape, tally, seed=index)
    actors: list[_SimActor] = []
    for aid in actor_ids:
        curve = keys_for(keys, aid)  # its own client pair, no server secret
        pusher = ZmqTransport(ctx, curve=curve).pusher(data_ep, linger_ms=0)
        control = _Control(actx, control_ep, aid, curve)
        actors.append(_SimActor(aid, shape, pusher, control, payload, clock, tally,
                                seed=int(aid.rsplit("-", 1)[1])))
    acks = await asyncio.gather(*(a.control.call(m.Hello(m.SCHEMA_VERSION, "actor", a.actor_id),
                                                 m.HelloAck) for a in actors))
    assert all(ack.ok for ack in acks)
    conn.send(("ready", len(actors)))
    t0, t1 = await asyncio.to_thread(conn.recv)
    cpu: list[float] = []

    async def mark(at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        cpu.append(time.process_time())

    marks = [asyncio.create_task(mark(t0)), asyncio.create_task(mark(t1))]
    clock.t0, clock.t1 = t0, t1
    await asyncio.gather(clock.run(t1), *(a.run(t0, t1) for a in actors))
    await asyncio.gather(*marks)
    queued = sum(len(a.out) for a in actors)
    for a in actors:
        a.pusher.close()
        a.control.close()
    conn.send({
        "credit_lat": tally.credit_lat,
        "denied": dict(tally.denied), "emitted": tally.emitted, "groups": tally.groups,
        "errors": dict(tally.errors), "timeouts": sum(a.control.timeouts for a in actors),
        "cpu_s": cpu[1] - cpu[0], "queued": queued,
    })


# ---- the buffer process -----------------------------------------------------------------


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def _runqueue_wait_s(thread: threading.Thread) -> float:
    """Seconds `thread` has waited runnable for a CPU (the 2nd field of its schedstat)."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return math.nan


def _probe(service: BufferService, thread: threading.Thread, with_stats: bool) -> dict[str, Any]:
    """The buffer process's counters now: the service's own record counter, CPU of the
    process and of the service thread, memory, open fds; `with_stats`: `service.metrics()`."""
    assert thread.ident is not None
    out: dict[str, Any] = {
        "t": time.monotonic(), "records": service.buffer.records,
        "cpu_proc": time.process_time(),
        "cpu_thread": time.clock_gettime(time.pthread_getcpuclockid(thread.ident)),
        "runq_thread": _runqueue_wait_s(thread),
        "rss_kb": _status_kb("VmRSS"), "hwm_kb": _status_kb("VmHWM"),
        "fds": len(os.listdir("/proc/self/fd")),
    }
    if with_stats:
        s = service.metrics()
        out.update(drops=dict(s.drops), records_per_frame=s.records_per_frame)
    return out


def _buffer_proc(keys: RunKeys, cfg: dict[str, Any], algo: dict[str, Any],
                 bounds: dict[str, Any], conn: Connection) -> None:
    """The buffer as a launch runs it (run/processes/buffer_group.py BufferHost), answering probes."""
    raise_fd_limit(4 * bounds["max_actors"] + 256)
    transport = ZmqTransport(curve=keys_for(keys, None, binds=True))
    service = BufferService(BufferConfig(**cfg), AlgorithmConfig(**algo), transport,
                            bounds=RecordBounds(**bounds))
    thread = service.start()
    conn.send((service.data_endpoint, service.control_endpoint))
    while (cmd := conn.recv()) != "stop":
        conn.send(_probe(service, thread, with_stats=cmd == "stats"))
    service.stop()
    transport.close()
    conn.send("stopped")


# ---- the learner ------------------------------------------------------------------------


@dataclass
class _LearnerTally:
    sample_lat: list[float] = field(default_factory=list)
    batch_bytes: list[int] = field(default_factory=list)
    decode_s: float = math.nan
    error: str = ""


def _learner(client: BufferClient, batch_groups: int, t0: float, t1: float,
             out: _LearnerTally) -> None:
    """learner/loop.py's sampling without the update: sample, version + 1, set_version.
    The latency is request to decoded batch (`BufferClient` decodes the reply)."""
    version = 0
    try:
        while (now := time.monotonic()) < t1:
            t = time.perf_counter()
            batch = client.sample(batch_groups, version, 0.0)
            dt = time.perf_counter() - t
            if not (batch.ready and batch.groups):
                time.sleep(0.05)
                continue
            version += 1
            client.set_version(version)
            if now >= t0:
                out.sample_lat.append(dt)
                if not out.batch_bytes:  # the reply's size, and what decoding it costs here
                    raw = m.encode(batch)
                    t = time.perf_counter()
                    m.decode_control(raw)
                    out.decode_s = time.perf_counter() - t
                    out.batch_bytes.append(len(raw))
    except (TimeoutError, RuntimeError) as e:
        out.error = f"{type(e).__name__}: {e}"


# ---- one row ----------------------------------------------------------------------------


@dataclass
class Row:
    actors: int
    batch_groups: int
    max_staleness: int
    offered: float
    sent: float
    ingested: float
    svc_us: float
    proc_us: float
    svc_busy: float
    svc_runq: float
    credit_p50: float
    credit_p99: float
    credit_n: int
    sample_p50: float
    sample_p99: float
    samples: int
    batch_mb: float
    rss_idle_mb: float
    rss_conn_mb: float
    rss_peak_mb: float
    fds: int
    drops: dict[str, int]
    denied: dict[str, int]
    jain: float
    groups_min_max: tuple[int, int]
    worker_us: float
    timeouts: int
    errors: dict[str, int]
    records_per_frame: float
    backlog: int
    frames_waiting: int
    decode_s: float
    notes: list[str] = field(default_factory=list)


def run_row(actors: int, shape: Shape, workers: int, seconds: float, warmup: float,
            batch_groups: int, max_staleness: int) -> Row:
    """One actor count: a fresh buffer process, the workers and the learner thread; counters
    probed at the window's start and end."""
    ids = [f"actor-{i}" for i in range(actors)]
    keys = RunKeys.generate([LEARNER, *ids])  # as `launch` does
    bg = batch_groups or auto_batch_groups(actors, shape.groups_in_flight)
    ms = max_staleness or auto_max_staleness(actors, shape.groups_in_flight, bg)
    cfg = dict(max_staleness=ms, spi_tolerance=float((ms + 1) * bg), snapshot_interval_s=0.0)
    algo = dict(group_size=shape.group_size, batch_groups=bg)
    longest = context_tokens(shape.steps - 1, shape.prompt_tokens, shape.action_tokens,
                             shape.obs_tokens) + shape.action_tokens
    bounds = dict(vocab_size=VOCAB, max_model_len=max(2048, longest), max_steps=shape.steps,
                  max_group_size=shape.group_size, max_actors=actors)
    spawn = mp.get_context("spawn")
    notes = [n for n in [raise_fd_limit(2 * actors + 256)] if n]

    buf_conn, child = spawn.Pipe()
    buf = spawn.Process(target=_buffer_proc, args=(keys, cfg, algo, bounds, child),
                        daemon=True)
    buf.start()
    print(f"  {actors} actors: buffer pid {buf.pid}", flush=True)  # for a sampling profiler
    data_ep, control_ep = buf_conn.recv()
    buf_conn.send("probe")
    idle = buf_conn.recv()

    conns: list[Connection] = []
    procs: list[mp.process.BaseProcess] = []
    for w in range(min(workers, actors)):
        parent, child = spawn.Pipe()
        p = spawn.Process(target=_worker, args=(w, ids[w::workers], keys, data_ep, control_ep,
                                                shape, child), daemon=True)
        p.start()
        conns.append(parent)
        procs.append(p)
    for c in conns:
        tag, _ = c.recv()
        assert tag == "ready"
    transport = ZmqTransport(curve=keys_for(keys, LEARNER))
    client = BufferClient(transport, control_ep, "learner", LEARNER)
    client.connect()
    buf_conn.send("probe")
    connected = buf_conn.recv()

    t0 = time.monotonic() + warmup
    t1 = t0 + seconds
    for c in conns:
        c.send((t0, t1))
    ltally = _LearnerTally()
    learner = threading.Thread(target=_learner, args=(client, bg, t0, t1, ltally))
    learner.start()
    time.sleep(max(0.0, t0 - time.monotonic()))
    buf_conn.send("stats")
    a = buf_conn.recv()
    time.sleep(max(0.0, t1 - time.monotonic()))
    buf_conn.send("stats")
    b = buf_conn.recv()
    tallies = [c.recv() for c in conns]
    learner.join()
    client.close()
    transport.close()
    for proc in procs:
        proc.join(30)
    buf_conn.send("stop")
    buf_conn.recv()
    buf.join(30)

    wall = b["t"] - a["t"]
    ingested_n = b["records"] - a["records"]
    credit_lat = [x for t in tallies for x in t["credit_lat"]]
    emitted = sum(t["emitted"] for t in tallies)
    groups = [n for t in tallies for n in t["groups"].values()]
    denied: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for t in tallies:
        denied.update(t["denied"])
        errors.update(t["errors"])
    drops = {k: v - a["drops"].get(k, 0) for k, v in b["drops"].items()  # drops only: the
             if v - a["drops"].get(k, 0) and not k.startswith(WIRE_PREFIX)}  # length ledger's
    # counts and its unsaved gauge travel in the same map (buffers/lengths.py)
    if ltally.error:
        notes.append(f"learner: {ltally.error}")
    return Row(
        actors=actors, batch_groups=bg, max_staleness=ms,
        offered=offered_records_per_s(actors, shape.steps_per_actor_s, shape.steps,
                                      shape.stats_interval_s),
        sent=emitted / seconds, ingested=ingested_n / wall,
        svc_us=(b["cpu_thread"] - a["cpu_thread"]) / max(ingested_n, 1) * 1e6,
        proc_us=(b["cpu_proc"] - a["cpu_proc"]) / max(ingested_n, 1) * 1e6,
        svc_busy=(b["cpu_thread"] - a["cpu_thread"]) / wall,
        svc_runq=(b["runq_thread"] - a["runq_thread"]) / wall,
        credit_p50=percentile(credit_lat, 0.5), credit_p99=percentile(credit_lat, 0.99),
        credit_n=len(credit_lat),
        sample_p50=percentile(ltally.sample_lat, 0.5),
        sample_p99=percentile(ltally.sample_lat, 0.99), samples=len(ltally.sample_lat),
        batch_mb=statistics.fmean(ltally.batch_bytes) / 1e6 if ltally.batch_bytes else 0.0,
        rss_idle_mb=idle["rss_kb"] / 1024, rss_conn_mb=connected["rss_kb"] / 1024,
        rss_peak_mb=b["hwm_kb"] / 1024, fds=connected["fds"], drops=drops,
        denied=dict(denied), jain=jain_index(groups),
        groups_min_max=(min(groups, default=0), max(groups, default=0)),
        worker_us=sum(t["cpu_s"] for t in tallies) / max(emitted, 1) * 1e6,
        timeouts=sum(t["timeouts"] for t in tallies), errors=dict(errors),
        records_per_frame=b["records_per_frame"], backlog=emitted - ingested_n,
        frames_waiting=sum(t["queued"] for t in tallies), decode_s=ltally.decode_s,
        notes=notes,
    )


def grant_cost(open_groups: Sequence[int], reps: int) -> list[tuple[int, float, float]]:
    """(groups, µs of one `EpisodeBuffer.grant`, ms of one `tick`) with that many groups
    assembling (one step each): what a CreditRequest and the 0.2 s timeout pass cost the
    service thread, without sockets, in this process; the fastest of 5 blocks (the least
    disturbed by a shared machine)."""
    rows = []
    for n in open_groups:
        buf = EpisodeBuffer(BufferConfig(max_staleness=10**6, spi_tolerance=1e9),
                            AlgorithmConfig(group_size=4, batch_groups=4))
        for gid in buf.grant("a", n).group_ids:
            buf.ingest(m.StepRecord(f"{gid}-e0", gid, "t", "a", "bench", 0,
                                    m.TokenIds([1] * 128), m.TokenIds([1] * 32),
                                    m.LogProbs([-0.5] * 32), policy_version=0))
        grants, ticks = [], []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(max(1, reps // 5)):
                buf.grant("b", 1)
            grants.append((time.perf_counter() - t) / max(1, reps // 5) * 1e6)
            t = time.perf_counter()
            for _ in range(4):
                buf.tick()
            ticks.append((time.perf_counter() - t) / 4 * 1e3)
        rows.append((n, min(grants), min(ticks)))
    return rows


# ---- main -------------------------------------------------------------------------------


def _ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 1e3:.1f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 and math.isfinite(a / b) else "n/a"


def _dropped(drops: dict[str, int]) -> int:
    """Records or groups refused or dropped (`reuse_exhausted` is a group trained and
    evicted at `buffer.max_reuse`, not a loss)."""
    return sum(v for k, v in drops.items() if k != "reuse_exhausted" and "/" not in k)


def print_rows(rows: list[Row]) -> None:
    base = rows[0]
    base_share = base.ingested / base.offered
    print(f"{'actors':>6} {'target/s':>8} {'sent/s':>7} {'ingest/s':>8} {'in/sent':>7} "
          f"{'in/target':>9} {'svc µs/rec':>10} {'proc µs/rec':>11} {'svc busy':>8} "
          f"{'svc runq':>8} {'credit p50/p99 ms':>17} {'sample p50/p99 ms (n, MB)':>26} "
          f"{'RSS idle/conn/peak MB':>21} {'fds':>5} {'dropped':>7} {'Jain':>5}")
    for r in rows:
        sample = f"{_ms(r.sample_p50)}/{_ms(r.sample_p99)} ({r.samples}, {r.batch_mb:.1f})"
        rss = f"{r.rss_idle_mb:.0f}/{r.rss_conn_mb:.0f}/{r.rss_peak_mb:.0f}"
        print(f"{r.actors:>6} {r.offered:>8,.0f} {r.sent:>7,.0f} {r.ingested:>8,.0f} "
              f"{r.ingested / max(r.sent, 1e-9):>7.2f} "
              f"{r.ingested / r.offered / base_share:>9.2f} {r.svc_us:>10.1f} "
              f"{r.proc_us:>11.1f} {r.svc_busy:>8.0%} {r.svc_runq:>8.0%} "
              f"{_ms(r.credit_p50) + '/' + _ms(r.credit_p99):>17} {sample:>26} {rss:>21} "
              f"{r.fds:>5} {_dropped(r.drops):>7} {r.jain:>5.3f}")
    print("(in/target: ingested share of the target load, ÷ the baseline row's; svc busy / runq:"
          " the service thread's CPU and its wait for a CPU, shares of the window)")
    print()
    for r in rows:
        print(f"{r.actors:>6} actors: batch {r.batch_groups} groups, max_staleness "
              f"{r.max_staleness}; {r.credit_n} credit requests, denied {r.denied or '{}'}; "
              f"groups per actor {r.groups_min_max[0]}–{r.groups_min_max[1]}; drops "
              f"{r.drops or '{}'}; {r.records_per_frame:.2f} records/frame; sent − ingested "
              f"{r.backlog}, frames waiting in actors {r.frames_waiting}; actor-side CPU "
              f"{r.worker_us:.0f} µs/record; learner decode {_ms(r.decode_s)} ms a batch; "
              f"timeouts {r.timeouts}, errors {r.errors or '{}'}"
              + (f"; {'; '.join(r.notes)}" if r.notes else ""))
    print()
    for r in rows[1:]:
        print(f"{r.actors:>6} vs {base.actors} actors: ingest/target "
              f"{_ratio(r.ingested / r.offered, base_share)}, credit p99 "
              f"{_ratio(r.credit_p99, base.credit_p99)}, sample p99 "
              f"{_ratio(r.sample_p99, base.sample_p99)} (batch "
              f"{_ratio(r.batch_mb, base.batch_mb)} the bytes), buffer RSS with all connected "
              f"− idle: {(r.rss_conn_mb - r.rss_idle_mb) * 1024 / r.actors:.0f} KB per actor")
    sat = saturation_point([(r.actors, r.offered, r.sent, r.ingested, r.credit_p99)
                            for r in rows])
    if sat is None:
        print(f"saturation: not reached up to {rows[-1].actors} actors "
              f"({rows[-1].ingested:,.0f} records/s ingested)")
    else:
        print(f"saturation: at {sat[0]} actors ({sat[1]})")
    last = rows[-1]
    print(f"the service thread's CPU per record at {last.actors} actors ({last.svc_us:.0f} µs) "
          f"would fill one dedicated core at ~{1e6 / last.svc_us:,.0f} records/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", default="10,100,300,600,1000",
                    help="comma-separated actor counts, swept in order (the first is the baseline)")
    ap.add_argument("--steps-per-actor-s", type=float, default=Shape.steps_per_actor_s)
    ap.add_argument("--workers", type=int, default=4, help="processes hosting the actors")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured window per row")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=Shape.steps)
    ap.add_argument("--group-size", type=int, default=Shape.group_size)
    ap.add_argument("--groups-in-flight", type=int, default=Shape.groups_in_flight)
    ap.add_argument("--prompt-tokens", type=int, default=Shape.prompt_tokens)
    ap.add_argument("--action-tokens", type=int, default=Shape.action_tokens)
    ap.add_argument("--obs-tokens", type=int, default=Shape.obs_tokens)
    ap.add_argument("--stats-interval-s", type=float, default=Shape.stats_interval_s)
    ap.add_argument("--batch-groups", type=int, default=0,
                    help="0: a quarter of the groups in flight")
    ap.add_argument("--max-staleness", type=int, default=0,
                    help="0: what the groups in flight need + 2")
    ap.add_argument("--grant-reps", type=int, default=1000,
                    help="grants timed per size in part 2 (0: skip it)")
    args = ap.parse_args()
    counts = [int(x) for x in args.actors.split(",")]
    shape = Shape(args.steps, args.group_size, args.groups_in_flight, args.prompt_tokens,
                  args.action_tokens, args.obs_tokens, args.steps_per_actor_s,
                  args.stats_interval_s)
    sizes = [len(m.encode(m.StepRecord(
        uuid.uuid4().hex, "0123abcd-100000", "task-000042", f"actor-{max(counts) - 1}", "bench",
        i, m.TokenIds([1] * context_tokens(i, shape.prompt_tokens, shape.action_tokens,
                                           shape.obs_tokens)),
        m.TokenIds([1] * shape.action_tokens), m.LogProbs([-0.5] * shape.action_tokens),
        policy_version=1, created_at=time.time()))) for i in range(shape.steps)]
    print(f"# buffer at scale: {asdict(shape)}")
    print(f"StepRecord sizes by step (full context): {sizes} B; "
          f"mean {statistics.fmean(sizes):.0f} B")
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    print(f"load before: {' '.join(load_before)} on {os.cpu_count()} cores; "
          f"{args.workers} actor processes, window {args.seconds:.0f} s after {args.warmup:.0f} s")
    rows: list[Row] = []
    for n in counts:
        t = time.monotonic()
        rows.append(run_row(n, shape, args.workers, args.seconds, args.warmup,
                            args.batch_groups, args.max_staleness))
        print(f"  {n} actors done in {time.monotonic() - t:.0f} s", flush=True)
    print()
    print_rows(rows)
    if args.grant_reps:
        sizes_g = sorted({n * shape.groups_in_flight for n in counts})
        print(f"\n## one CreditRequest's grant and one tick vs groups assembling "
              f"(EpisodeBuffer alone, {args.grant_reps} grants each, fastest of 5 blocks)")
        print(f"{'groups':>7} {'grant µs':>9} {'× first':>8} {'tick ms':>8}")
        cost = grant_cost(sizes_g, args.grant_reps)
        for n, grant_us, tick_ms in cost:
            print(f"{n:>7} {grant_us:>9.1f} {grant_us / cost[0][1]:>8.1f} {tick_ms:>8.2f}")
    with open("/proc/loadavg") as f:
        print(f"load after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()

"""Async vs sync under long-tail episodes: real buffer, ZeroMQ and `Learner.update()`.

    .venv/bin/python -m bench.bench_async_vs_sync            # ~4 minutes on 2 cores
    .venv/bin/python -m bench.bench_async_vs_sync --quick    # ~1 minute, one repeat

What is real and what is simulated
- Real: `BufferService` in its own process (admission control, assembly, prioritized store,
  rate limiter), `BufferClient` over ZeroMQ for credits and samples, actors' StepRecord /
  EpisodeEnd frames over ZeroMQ PUSH, and `Learner.update()` (sample, batching into padded
  micro-batches, advantages, metrics, version bump, `set_version`).
- Simulated: generation and tools (an episode sleeps a lognormal duration, emitting its
  `steps` StepRecords evenly over it, then its EpisodeEnd) and the optimizer (the injected
  `SleepTrainer` sleeps `update_s` per update). Actors are threads in one process; each has
  its own BufferClient and PUSH socket, runs at most one group (G concurrent episodes) at a
  time, and stamps records with the learner version of its last credit grant.
- Sync is the same code with `buffer.max_staleness = 0`: a version's groups can only start
  after the learner has trained on the previous batch. Async uses `--max-staleness` (2).
  Denied actors ask again every `--poll-ms` (20 ms, in both modes; the real actor backs off
  from 50 ms up to 1 s, which would only slow sync mode down further).
- `buffer.spi_tolerance` is raised to (max_staleness + 1) × batch_groups in both modes so
  the staleness bound, not the samples-per-insert window, limits how far actors run ahead
  (the default window of 4 groups would cap async at ~B + 1 groups in flight).

The ideal model (`ideal_per_update`), for P actors (= group slots), batch of B groups,
optimizer step U, staleness bound k, group duration D = max of G episode durations:
    sync  per update = E[makespan of B groups on P slots] + U   (P >= B: E[max of B D's])
    async per update = max(U, B·E[D] / min(P, (k+1)·B))          (generation throughput
                                                                  vs the learner, steady state)
Expectations are Monte Carlo over the same lognormal. Times are per update in steady state:
the benchmark times K updates after W warm-up updates.
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent_r1_async.buffers.lengths import WIRE_PREFIX
from agent_r1_async.wire import messages as m  # light imports only: spawned children re-import
from bench.children import next_message
from bench.stats import fmt_spread, load_line


@dataclass(frozen=True)
class Workload:
    median_s: float = 0.08
    """Median episode duration (generation + tool calls), seconds."""
    sigma: float = 1.0
    """Lognormal shape: p99 / median = e^(2.33σ) ≈ 10 at σ = 1."""
    group_size: int = 4
    steps: int = 4
    """StepRecords per episode."""
    batch_groups: int = 4
    update_s: float = 0.2
    """Fake optimizer step, seconds."""
    context_tokens: int = 128
    action_tokens: int = 32


# ---------------------------------------------------------------- the ideal model (pure)


def makespan(durations: list[float] | np.ndarray, slots: int) -> float:
    """Finish time of jobs taken in order by the first free of `slots` workers (list scheduling)."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if slots >= len(durations):
        return float(max(durations))
    free = [0.0] * slots
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + float(d))
    return max(free)


def ideal_per_update(
    group_durations: np.ndarray, slots: int, max_staleness: int, update_s: float
) -> tuple[float, float]:
    """(sync, async) seconds per update; `group_durations` is [trials, B] Monte Carlo draws."""
    b = group_durations.shape[1]
    if slots >= b:
        span = float(group_durations.max(axis=1).mean())
    else:
        span = statistics.fmean(makespan(row, slots) for row in group_durations)
    sync = span + update_s
    parallel = min(slots, (max_staleness + 1) * b)
    asyn = max(update_s, b * float(group_durations.mean()) / parallel)
    return sync, asyn


def draw_group_durations(w: Workload, trials: int, seed: int = 0) -> np.ndarray:
    """[trials, B] group durations: each the max of G lognormal episode durations."""
    rng = np.random.default_rng(seed)
    eps = rng.lognormal(np.log(w.median_s), w.sigma, size=(trials, w.batch_groups, w.group_size))
    return eps.max(axis=2)


# ---------------------------------------------------------------- buffer process


def _buffer_main(w: Workload, max_staleness: int, spi_tol: float, sampling: str, q: Any,
                 stop: Any) -> None:
    from agent_r1_async.buffers.service import BufferService
    from agent_r1_async.config import AlgorithmConfig, BufferConfig
    from agent_r1_async.wire.zmq import ZmqTransport

    cfg = BufferConfig(max_staleness=max_staleness, spi_tolerance=spi_tol, sampling=sampling,
                       snapshot_interval_s=0.0, min_group_episodes=w.group_size)
    algo = AlgorithmConfig(group_size=w.group_size, batch_groups=w.batch_groups)
    transport = ZmqTransport()
    service = BufferService(cfg, algo, transport)
    service.start()
    q.put((service.data_endpoint, service.control_endpoint))
    stop.wait()
    q.put(m.encode(service.metrics()))
    service.stop()
    transport.close()


# ---------------------------------------------------------------- simulated actors


class SimActor:
    """One actor thread: credits -> one group of G episodes -> timed records over PUSH."""

    def __init__(self, idx: int, w: Workload, transport: Any, endpoints: tuple[str, str],
                 poll_s: float, seed: int) -> None:
        from agent_r1_async.wire.buffer_client import BufferClient

        self.idx, self.w, self.poll_s = idx, w, poll_s
        self.rng = np.random.default_rng([seed, idx])
        self.client = BufferClient(transport, endpoints[1], "actor", f"sim-{idx}")
        self.pusher = transport.pusher(endpoints[0])
        r = random.Random(idx)
        self.ctx = m.TokenIds([r.randrange(49152) for _ in range(w.context_tokens)])
        self.act = m.TokenIds([r.randrange(49152) for _ in range(w.action_tokens)])
        self.lps = m.LogProbs([-r.random() for _ in range(w.action_tokens)])
        self.version = 0
        self.events: list[tuple[float, int, Any]] = []  # (due, seq, message factory args)
        self.seq = 0
        self.group_end = 0.0

    def _schedule_group(self, gid: str, now: float) -> None:
        w = self.w
        durations = self.rng.lognormal(np.log(w.median_s), w.sigma, size=w.group_size)
        for e, t in enumerate(durations):
            for s in range(w.steps):
                self._push_event(now + t * (s + 1) / w.steps, ("step", gid, e, s))
            self._push_event(now + t, ("end", gid, e, float(self.rng.random() < 0.5)))
        self.group_end = now + float(durations.max())

    def _push_event(self, due: float, ev: tuple) -> None:
        heapq.heappush(self.events, (due, self.seq, (ev, self.version)))
        self.seq += 1

    def _message(self, ev: tuple, version: int) -> m.StepRecord | m.EpisodeEnd:
        w, aid = self.w, f"sim-{self.idx}"
        if ev[0] == "step":
            _, gid, e, s = ev
            return m.StepRecord(f"{gid}-{e}", gid, f"t{self.idx}", aid, "sim", s, self.ctx,
                                self.act, self.lps, policy_version=version,
                                done=s == w.steps - 1, created_at=time.time())
        _, gid, e, reward = ev
        return m.EpisodeEnd(f"{gid}-{e}", gid, f"t{self.idx}", aid, "sim", w.steps, reward,
                            "ok", w.group_size, created_at=time.time())

    def run(self, stop: threading.Event) -> None:
        self.client.connect()
        next_credit = 0.0
        try:
            while not stop.is_set():
                now = time.monotonic()
                while self.events and self.events[0][0] <= now:
                    _, _, (ev, version) = heapq.heappop(self.events)
                    self.pusher.send([m.encode(self._message(ev, version))])
                idle = now >= self.group_end and not self.events
                if idle and now >= next_credit:
                    grant = self.client.request_credits(1)
                    self.version = grant.learner_version
                    if grant.groups:
                        self._schedule_group(grant.group_ids[0], time.monotonic())
                    else:
                        next_credit = now + self.poll_s
                    continue
                wake = self.events[0][0] if self.events else next_credit
                time.sleep(min(max(0.0, wake - time.monotonic()), 0.05))
        finally:
            self.client.close()
            self.pusher.close()


def _actors_main(n: int, w: Workload, endpoints: tuple[str, str], poll_s: float, seed: int,
                 stop: Any, dead: Any) -> None:
    from agent_r1_async.wire.zmq import ZmqTransport

    transport = ZmqTransport()
    halt = threading.Event()
    actors = [SimActor(i, w, transport, endpoints, poll_s, seed) for i in range(n)]

    def guarded(actor: SimActor) -> None:  # a dead actor thread is counted, not silent
        try:
            actor.run(halt)
        except Exception as e:
            with dead.get_lock():
                dead.value += 1
            print(f"actor thread died: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=guarded, args=(a,), daemon=True) for a in actors]
    for t in threads:
        t.start()
    stop.wait()
    halt.set()
    for t in threads:
        t.join(10)
    transport.close()


# ---------------------------------------------------------------- the learner side


class SleepTrainer:
    """Stands in for PolicyTrainer: no model; the optimizer step is a fixed sleep."""

    pad_id = 2
    publish_dtype = None  # publishes nothing
    shared_prefix = False  # the Learner plans flat rows for it
    attention_cost = 0.0

    def __init__(self, update_s: float) -> None:
        self.update_s = update_s

    def needs_proximal_pass(self, epochs: int) -> bool:
        return True

    def proximal_pass(self, mbs: list) -> None:
        for mb in mbs:
            mb.proximal_logprobs = mb.behavior_logprobs.clone()

    def optimize(self, mbs: list, version: int | None = None,
                 counts: tuple[int, int] | None = None) -> dict[str, float]:
        time.sleep(self.update_s)
        return {"loss": 0.0}

    def published_state_dict(self, dtype: torch.dtype | None = None) -> dict:
        return {}


@dataclass
class RunResult:
    per_update_s: float
    idle_frac: float
    busy_s: float
    """Learner time per update outside the data wait (U + the real update code)."""
    staleness_mean: float
    drops: dict[str, int]
    dead_actors: int = 0
    """Simulated actor threads that died (e.g. a control request timing out)."""


def run_once(w: Workload, n_actors: int, max_staleness: int, spi_tol: float, warmup: int,
             updates: int, poll_s: float, seed: int, sampling: str = "prioritized") -> RunResult:
    """Time `updates` Learner.update() calls after `warmup`, with fresh buffer and actors."""
    from agent_r1_async.config import AlgorithmConfig, BufferConfig, LearnerConfig, RunConfig
    from agent_r1_async.learner.loop import Learner
    from agent_r1_async.wire.buffer_client import BufferClient
    from agent_r1_async.wire.zmq import ZmqTransport

    ctx = mp.get_context("spawn")
    q, stop, dead = ctx.Queue(), ctx.Event(), ctx.Value("i", 0)
    buf = ctx.Process(target=_buffer_main,
                      args=(w, max_staleness, spi_tol, sampling, q, stop))
    buf.start()
    endpoints = next_message(q, buf, 60, "the buffer process")
    actors = ctx.Process(target=_actors_main, args=(n_actors, w, endpoints, poll_s, seed, stop, dead))
    actors.start()
    cfg = RunConfig(
        algorithm=AlgorithmConfig(group_size=w.group_size, batch_groups=w.batch_groups),
        buffer=BufferConfig(max_staleness=max_staleness, spi_tolerance=spi_tol),
        learner=LearnerConfig(total_updates=warmup + updates, sample_timeout_s=120.0),
    )
    transport = ZmqTransport()
    client = BufferClient(transport, endpoints[1], "learner", "learner", timeout_s=30.0)
    try:
        client.connect()
        learner = Learner(cfg, client, None, None, trainer=SleepTrainer(w.update_s))
        for _ in range(warmup):
            learner.update()
        t0 = time.monotonic()
        ms = [learner.update() for _ in range(updates)]
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        stats = m.decode_control(next_message(q, buf, 60, "the buffer process"))
        client.close()
        transport.close()
        actors.join(30)
        buf.join(30)
    wait = sum(x["data_wait_s"] for x in ms)
    busy = sum(x["update_time_s"] for x in ms)
    return RunResult(elapsed / updates, wait / busy, (busy - wait) / updates,
                     statistics.fmean(x["staleness_mean"] for x in ms), dict(stats.drops),
                     dead.value)


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--updates", type=int, default=12, help="timed updates per run (K)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed updates first (W)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-staleness", type=int, default=2)
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--median-s", type=float, default=Workload.median_s)
    ap.add_argument("--sigma", type=float, default=Workload.sigma)
    ap.add_argument("--update-s", type=float, default=Workload.update_s)
    ap.add_argument("--sampling", default="prioritized", choices=["prioritized", "fifo"])
    ap.add_argument("--quick", action="store_true", help="1 repeat, K=6, actors 4 16")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.updates, args.actors = 1, 6, [4, 16]
    w = Workload(median_s=args.median_s, sigma=args.sigma, update_s=args.update_s)
    k, b = args.max_staleness, w.batch_groups
    spi_tol = float((k + 1) * b)
    draws = draw_group_durations(w, 20_000)
    ep = np.random.default_rng(1).lognormal(np.log(w.median_s), w.sigma, 200_000)
    print(f"## Async (max_staleness {k}) vs sync (0): K={args.updates} updates after "
          f"{args.warmup} warm-up, median of {args.repeats} repeats; {args.sampling} sampling; "
          f"SIMULATED generation (sleeps) and optimizer (sleep U); {load_line()} at the start")
    print(f"episode ~ lognormal(median {w.median_s * 1e3:.0f} ms, σ {w.sigma}): mean "
          f"{ep.mean() * 1e3:.0f} ms, p99 {np.percentile(ep, 99) * 1e3:.0f} ms; "
          f"group of {w.group_size}: E[D] {draws.mean() * 1e3:.0f} ms; batch {b} groups; "
          f"U = {w.update_s * 1e3:.0f} ms; {w.steps} steps × "
          f"{w.context_tokens}+{w.action_tokens} tokens")
    print(f"{'actors':>6} {'sync s/upd':>10} {'async s/upd':>11} {'speedup':>8} "
          f"{'ideal sync':>10} {'ideal async':>11} {'ideal':>6} {'of ideal':>8} "
          f"{'idle async':>10} {'idle sync':>9} {'busy':>6} {'stale':>6}")
    for n in args.actors:
        ideal_s, ideal_a = ideal_per_update(draws, n, k, w.update_s)
        rows: list[tuple[RunResult, RunResult]] = []
        for r in range(args.repeats):
            seed = 1000 * r + n  # the same episode durations for sync and async
            s, a = (run_once(w, n, staleness, spi_tol, args.warmup, args.updates,
                             args.poll_ms / 1e3, seed, args.sampling)
                    for staleness in (0, k))
            rows.append((s, a))
        med = statistics.median
        sync_t = med(s.per_update_s for s, _ in rows)
        async_t = med(a.per_update_s for _, a in rows)
        speed = med(s.per_update_s / a.per_update_s for s, a in rows)
        ideal = ideal_s / ideal_a
        print(f"{n:>6} {sync_t:>10.3f} {async_t:>11.3f} {speed:>7.2f}× {ideal_s:>10.3f} "
              f"{ideal_a:>11.3f} {ideal:>5.2f}× {speed / ideal:>8.2f} "
              f"{med(a.idle_frac for _, a in rows):>10.1%} "
              f"{med(s.idle_frac for s, _ in rows):>9.1%} "
              f"{med(a.busy_s for _, a in rows):>6.3f} "
              f"{med(a.staleness_mean for _, a in rows):>6.2f}", flush=True)
        speeds = [s.per_update_s / a.per_update_s for s, a in rows]
        dead = sum(s.dead_actors + a.dead_actors for s, a in rows)
        print(f"       speedup per repeat: {', '.join(f'{x:.2f}' for x in speeds)} -> "
              f"{fmt_spread(speeds, 2, '×')}; of ideal {fmt_spread([x / ideal for x in speeds])};"
              f" actor threads died: {dead}", flush=True)
        drops = {key: v for _, a in rows for key, v in a.drops.items()  # not the length
                 if v and not key.startswith(WIRE_PREFIX)}  # ledger in the same map
        if drops:
            print(f"       async buffer drops: {drops}")
    print(f"({load_line()} at the end)")


if __name__ == "__main__":
    main()

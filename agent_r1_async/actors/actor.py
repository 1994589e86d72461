"""The actor: groups of episodes on one engine, streamed step by step to the buffer.

    start: connect to the buffer, whose answer carries the learner's version
    loop:  apply newest weights (if any) -> ActorStats when due (at once on the first pass)
           -> ask the buffer for credits for free group slots
           -> start one group (G concurrent episodes of one task) per credit -> wait a bit
    each episode: StepRecord per step as it exists, EpisodeEnd at the end, played by the
                  episode runner (runner.py: our rollout, or a black-box agent's session)
    every actors.stats_interval_s: ActorStats (with how long ago the actor made progress,
                                   stats.py: the launcher judges a hung actor by it)

Design choices
- One asyncio loop per actor; every episode is a coroutine, so the engine sees all in-flight
  episodes' requests at once (continuous batching in vLLM, batched calls in transformers).
  Blocking socket calls (credit requests) run in a worker thread; sends never block the loop.
  `emit` goes through a `BatchEmitter` (emitter.py): messages emitted within one loop turn
  (episodes whose steps finish together) leave as one frame at the next turn; a full PUSH
  pipe is retried after an `await asyncio.sleep`, and a message accepted for sending is never
  dropped (emitters wait once too much is queued: backpressure, not loss). Shutdown flushes
  the emitter before closing the pusher; a failed send fails the actor.
- Admission control lives in the buffer: a group starts only with a credit, at most
  `actors.groups_in_flight` groups run at once.
- Weights are polled between generation calls and handed to the engine, which swaps them
  without stopping (see the engines); the per-step versions in the records tell which
  version produced each action.
- A (re)started actor generates nothing its weights make too stale: the buffer's answer to
  its `Hello` carries the learner's version, so before its first credit request the actor
  knows its engine's weights are behind and waits for newer ones (a process Ray restarted
  mid-run starts from the initial weights; the learner publishes after every update, and
  every `learner.republish_s` while it waits for data). The first report goes out before the
  first credit request: an actor that hangs right after a grant has already reported.
- Tasks: actor i of N takes tasks i, i+N, ... of the train split, reshuffled every pass
  with seed `actors.seed + i`.
- A plain class: the launcher wraps it with `ray.remote`; tests construct it directly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import threading
import time
from collections.abc import Iterator

from agent_r1_async.actors.emitter import BatchEmitter
from agent_r1_async.actors.engines import Engine, make_engine
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.actors.runner import open_runner
from agent_r1_async.actors.stats import StatsReporter
from agent_r1_async.config import RunConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.envs.registry import EnvSpec, get_env_spec
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.messages import ActorStats, EpisodeEnd, StepRecord
from agent_r1_async.wire.transport import Transport

log = logging.getLogger(__name__)

_IDLE_S = 0.05
_FLUSH_TIMEOUT_S = 60.0


def shard_tasks(tasks: list[Task], index: int, num_actors: int, seed: int) -> Iterator[Task]:
    """Endless iterator over tasks index, index+N, ...; reshuffled each pass with `seed`."""
    if not 0 <= index < num_actors:
        raise ValueError(f"actor index {index} is outside [0, actors.num_actors={num_actors})")
    mine = tasks[index::num_actors]
    if not mine:
        raise ValueError(
            f"actor {index} of {num_actors} gets no tasks: the split has only {len(tasks)}"
        )
    rng = random.Random(seed)
    while True:
        order = list(mine)
        rng.shuffle(order)
        yield from order


def actor_index(actor_id: str) -> int:
    """`actor-3` -> 3 (the trailing number of the id), 0 when there is none."""
    match = re.search(r"(\d+)$", actor_id)
    return int(match.group(1)) if match else 0


class Actor:
    def __init__(
        self,
        cfg: RunConfig,
        actor_id: str,
        transport: Transport,
        data_endpoint: str,
        control_endpoint: str,
        weights_endpoint: str | None,
        engine: Engine | None = None,
        index: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.actor_id = actor_id
        self.transport = transport
        self.data_endpoint = data_endpoint
        self.control_endpoint = control_endpoint
        self.weights_endpoint = weights_endpoint
        self.engine = engine
        self._owns_engine = engine is None
        self.index = actor_index(actor_id) if index is None else index
        self.groups_started = 0
        self.groups_dropped = 0
        """Groups stopped because the buffer held no credit for them (`_drop`)."""
        self.learner_version = 0
        """The newest learner version the buffer reported (with each credit grant)."""
        self.weight_errors = 0
        self._emitter: BatchEmitter | None = None

    @property
    def sent(self) -> int:
        """Data messages handed to the pusher."""
        return 0 if self._emitter is None else self._emitter.sent

    def run(self, stop: threading.Event | None = None, max_groups: int | None = None) -> None:
        """Run until `stop` is set (in-flight episodes end "aborted") or `max_groups` finish."""
        asyncio.run(self._main(stop or threading.Event(), max_groups))

    # ---------------------------------------------------------------- setup / teardown

    async def _main(self, stop: threading.Event, max_groups: int | None) -> None:
        from agent_r1_async.models import load_tokenizer, resolve_model
        from agent_r1_async.weights.backends import make_weight_receiver

        cfg = self.cfg
        model_path = resolve_model(cfg.model.start_from)
        spec = get_env_spec(cfg.env)
        tasks = shard_tasks(
            spec.tasks(cfg.env.train_split), self.index, cfg.actors.num_actors,
            cfg.actors.seed + self.index,
        )
        if self.engine is None:
            self.engine = make_engine(cfg, model_path, seed=cfg.actors.seed + self.index)
        tokenizer = load_tokenizer(model_path)
        rollout = Rollout.from_config(cfg, self.engine, tokenizer, spec.name, self.actor_id,
                                      cfg.actors.delta_records)
        self._reporter = StatsReporter(self.actor_id, rollout.counters)
        self._pusher = self.transport.pusher(self.data_endpoint)
        self._emitter = BatchEmitter(self._pusher)
        client = BufferClient(self.transport, self.control_endpoint, "actor", self.actor_id)
        receiver = (
            make_weight_receiver(cfg, self.transport, self.weights_endpoint, self.actor_id)
            if self.weights_endpoint else None
        )
        self.runner = await open_runner(cfg, spec, rollout, self.transport, self.index)
        watch = asyncio.create_task(self._release_on_stop(stop))
        try:
            ack = await asyncio.to_thread(client.connect)
            self.learner_version = max(self.learner_version, ack.learner_version)
            await self._loop(spec, tasks, client, receiver, stop, max_groups)
            await self.emit(self._reporter.report(self.engine.version))
        finally:
            watch.cancel()
            try:  # accepted messages reach the pipe before close, unless the buffer is gone
                await asyncio.wait_for(self._emitter.flush(), _FLUSH_TIMEOUT_S)
            except TimeoutError:
                log.error("%s: buffer not reading: %d accepted messages unsent after %.0f s",
                          self.actor_id, self._emitter.queued, _FLUSH_TIMEOUT_S)
            finally:
                client.close()
                if receiver is not None:
                    receiver.close()
                self._pusher.close()  # linger: queued records still leave
                await self.runner.close()  # a black-box env's endpoint
                if self._owns_engine:
                    await self.engine.close()

    async def _release_on_stop(self, stop: threading.Event) -> None:
        """Once stopping, emits stop waiting for a full pipe: a loop or an aborted episode
        blocked in `emit` while the buffer is not reading could otherwise never see `stop`
        (the shutdown flush then gives the pipe `_FLUSH_TIMEOUT_S` to drain)."""
        while not stop.is_set():
            await asyncio.sleep(_IDLE_S)
        assert self._emitter is not None
        self._emitter.release()

    # ---------------------------------------------------------------- the loop

    async def _loop(self, spec, tasks, client, receiver, stop, max_groups) -> None:
        running: dict[asyncio.Task, str] = {}  # each group's task -> its group id
        next_stats = time.monotonic()  # the first report before the first credit request
        backoff, next_credit = _IDLE_S, 0.0  # denied credits: ask again later, doubling the wait
        next_claim = 0.0  # the groups it runs are told to the buffer at least this often
        try:
            while not stop.is_set():
                await self._apply_weights(receiver)  # polled every _IDLE_S at least
                left = None if max_groups is None else max_groups - self.groups_started
                if left == 0 and not running:
                    return
                now = time.monotonic()
                if now >= next_stats:
                    await self.emit(self._reporter.report(self.engine.version))
                    next_stats = now + self.cfg.actors.stats_interval_s
                free = self.cfg.actors.groups_in_flight - len(running)
                if self._too_stale():  # data made now could never be trained: await weights
                    free = 0
                want = free if left is None else min(free, left)
                ask = want > 0 and now >= next_credit
                if ask or (running and now >= next_claim):
                    granted, unknown = await self._credits(client, want if ask else 0,
                                                           list(running.values()))
                    next_claim = time.monotonic() + self.cfg.actors.stats_interval_s
                    await self._drop(running, unknown)
                    for group_id in granted:
                        task = asyncio.create_task(self._group(spec, next(tasks), group_id))
                        running[task] = group_id
                    if ask:
                        backoff = _IDLE_S if granted else min(backoff * 2, 1.0)
                        next_credit = 0.0 if granted else time.monotonic() + backoff
                if running:
                    done, _ = await asyncio.wait(
                        running, timeout=_IDLE_S, return_when=asyncio.FIRST_COMPLETED
                    )
                    for t in done:
                        del running[t]
                        t.result()  # an emit failure is an actor failure: surface it
                else:
                    await asyncio.sleep(_IDLE_S)
                self._emitter.check()  # so is a failed coalesced send
        finally:
            # A task cancelled before its first step never runs its body, so it could not send
            # its "aborted" end record. Two loop turns let just-created group tasks start and
            # create their episode tasks (turn 1), and those episodes start (turn 2).
            for _ in range(2):
                await asyncio.sleep(0)
            for t in running:
                t.cancel()  # episodes send their "aborted" end records
            await asyncio.gather(*running, return_exceptions=True)

    async def _drop(self, running: dict[asyncio.Task, str], unknown: list[str]) -> None:
        """Stop the groups the buffer does not know (a restarted buffer that lost them, or
        groups it dropped): their records would be refused. Their episodes end "aborted"."""
        gone = set(unknown)
        # A finished group (the buffer accepted it before this loop collected it) stays for
        # `_loop` to collect: its result, an emit failure included, must surface there.
        stopped = {t: g for t, g in running.items() if g in gone and not t.done()}
        if not stopped:
            return
        for t in stopped:
            del running[t]
            t.cancel()
        await asyncio.gather(*stopped, return_exceptions=True)
        self.groups_dropped += len(stopped)
        log.warning("%s: the buffer holds no credit for %d group(s) this actor ran (%s): "
                    "stopped them", self.actor_id, len(stopped),
                    ", ".join(sorted(stopped.values())[:4]))

    def _too_stale(self) -> bool:
        """The engine's weights are more than max_staleness behind the learner (a restarted
        actor or a resumed run before the current weights arrive)."""
        return self.learner_version - self.engine.version > self.cfg.buffer.max_staleness

    async def _credits(self, client: BufferClient, want: int,
                       held: list[str]) -> tuple[list[str], list[str]]:
        """(the group ids the buffer granted, at most `want`; the groups of `held` it holds no
        credit for). The buffer alone mints group ids."""
        try:
            grant = await asyncio.to_thread(client.request_credits, want, held)
        except (TimeoutError, RuntimeError) as e:  # buffer busy or restarting: try again later
            log.warning("%s: credit request failed: %s", self.actor_id, e)
            return [], []
        self.learner_version = max(self.learner_version, grant.learner_version)
        if len(grant.group_ids) != grant.groups:
            log.error("%s: grant of %d groups carries %d ids; ignored", self.actor_id,
                      grant.groups, len(grant.group_ids))
            return [], []
        granted = grant.group_ids[: max(0, want)]
        self.groups_started += len(granted)
        return granted, list(grant.unknown)

    async def _group(self, spec: EnvSpec, task: Task, group_id: str) -> list[EpisodeEnd]:
        g = self.cfg.algorithm.group_size
        return await asyncio.gather(
            *(self.runner.run(task, EpisodeIds.fresh(group_id, g), self.emit)
              for _ in range(g))
        )

    async def _apply_weights(self, receiver) -> None:
        """The weight path (weights/seam.py) applies the newest version, if any;
        it counts and logs a failed or rejected one and the engine keeps serving."""
        if receiver is None:
            return
        applied = await receiver.update(self.engine)
        self.weight_errors = receiver.failed + receiver.rejected
        if applied is None:
            return
        latency = max(0.0, time.time() - applied.published_at)
        self._reporter.counters.weight_sync_latency_s = latency
        log.info("%s: serving weights v%d", self.actor_id, applied.version)

    async def emit(self, msg: StepRecord | EpisodeEnd | ActorStats) -> None:
        """Queue one message for the next coalesced frame (waits while too much is queued)."""
        await self._emitter.emit(msg)  # type: ignore[union-attr]

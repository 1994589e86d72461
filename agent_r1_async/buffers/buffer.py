"""The buffer's logic without sockets: assembly -> admission -> store -> rate limiter.

`EpisodeBuffer` is what the service drives (and what unit tests drive directly, with a
fake clock). Data flow:

    ingest(StepRecord | EpisodeEnd)  -> granted to its actor? -> range checks -> Assembler
                                     -> ready groups -> (stale? drop) -> (every advantage
                                        zero? drop, under algorithm.filter_groups) -> GroupStore
    grant(actor, n, held)            -> reconcile `held` (below), then min(admission capacity,
                                        rate-limiter room), 0 if memory full
    try_sample(k, version)           -> drop stale, rate-limiter check, GroupStore.sample
    tick()                           -> timeouts (dead actors, missing steps, unused credits)
    reclaim(actor)                   -> an actor the launcher replaces gives everything back now
    saved()                          -> a snapshot holds everything received so far

Episode lengths (buffers/lengths.py): the assembler counts the episodes generated and dropped
by length bucket, this class the ones it hands to the learner (a group's first sample) and the
ones it drops as stale before their first sample; `stats()` carries the counts in `drops` under
`lengths.WIRE_PREFIX`, with what a restart from the last snapshot would discard
(buffers/unsaved.py).

Only groups granted to the record's actor are assembled: a record of any other group is refused
(`invalid_record/ungranted`) and keeps nothing, so foreign records can neither take admission
credits nor memory. With an authenticated `sender` (CurveZMQ) a record or ActorStats must also
come from the actor it names (`identity`; wire/roles.py).

Memory bound: when the stored + assembling bytes reach `max_bytes`, credits stop ("memory_full").
Groups already granted still complete and are kept (bounded overshoot of at most the
in-flight groups), so accepted data is never dropped for lack of memory.

Actor silence (`BufferStats.actor_silence_s`) is counted on the buffer's listening clock
(buffers/silence.py); `reclaim` forgets the actor: its next process is judged from its first
report.

Credits given back before their groups complete (after a restart, from a replaced actor, on
a relaunch) are buffers/reclaim.py's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from agent_r1_async.buffers.admission import AdmissionControl
from agent_r1_async.buffers.assembly import Assembler, episode_nbytes
from agent_r1_async.buffers.lengths import UNSAVED, WIRE_PREFIX, Loss
from agent_r1_async.buffers.rate_limiter import SampleToInsertRatio
from agent_r1_async.buffers.reclaim import CreditReturns
from agent_r1_async.buffers.silence import ActorSilence
from agent_r1_async.buffers.state import BufferState, StoredState
from agent_r1_async.buffers.store import GroupStore, StoredGroup, describe
from agent_r1_async.buffers.unsaved import UnsavedEpisodes
from agent_r1_async.buffers.validate import RecordBounds, check_record, check_stats
from agent_r1_async.buffers.zero_advantage import zero_advantage
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire import roles
from agent_r1_async.wire.messages import (
    ActorStats,
    BufferStats,
    CreditGrant,
    Episode,
    EpisodeEnd,
    SampleBatch,
    StepRecord,
)

log = logging.getLogger(__name__)

ZERO_ADVANTAGE = "zero_advantage"
"""The drop reason of a group `algorithm.filter_groups` leaves out (buffers/zero_advantage.py)."""

_DEFAULT_MAX_ACTORS = 256
"""ActorStats kept when `RecordBounds.max_actors` is 0 (unknown: no bounds from a launch)."""


class EpisodeBuffer:
    def __init__(
        self,
        cfg: BufferConfig,
        algo: AlgorithmConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        bounds: RecordBounds | None = None,
    ) -> None:
        """`bounds`: the run's record bounds, built once at launch
        (`RecordBounds.from_config`); None (tests, benchmarks): only `algorithm.group_size`
        is checked. Either way the group-size bound is `algo.group_size` (`group_size`)."""
        self.cfg = cfg
        self.version = 0
        self._clock = clock
        self.group_size = algo.group_size
        """The run's group size (`algorithm.group_size`), the buffer's one number for it: the
        bound on an EpisodeEnd's `group_size` (`bounds.max_group_size`) and the size a group
        waits for when its own size was refused (buffers/assembly.py, "Group size")."""
        self._zero_advantage_rule = ((algo.credit, algo.gamma) if algo.filter_groups
                                     else None)
        """(credit, γ) when `algorithm.filter_groups` drops groups that teach nothing."""
        self.bounds = replace(bounds or RecordBounds(), max_group_size=self.group_size)
        self._max_actors = self.bounds.max_actors or _DEFAULT_MAX_ACTORS
        self.admission = AdmissionControl(
            cfg.max_staleness,
            algo.batch_groups,
            lambda: self.version,
            clock,
            cfg.episode_timeout_s,
        )
        self.assembler = Assembler(
            cfg.group_wait_s, cfg.min_group_episodes, cfg.episode_timeout_s, cfg.step_grace_s,
            max_steps=self.bounds.max_steps,
        )
        self.store = GroupStore(
            cfg.sampling,
            cfg.alpha,
            cfg.beta,
            cfg.freshness_decay,
            cfg.priority_eps,
            cfg.max_staleness,
            cfg.max_reuse,
            cfg.seed,
            cfg.staleness_from,
        )
        self.limiter = SampleToInsertRatio(
            cfg.samples_per_insert,
            cfg.min_groups_to_sample,
            cfg.spi_tolerance,
            algo.batch_groups,
        )
        self.drops: Counter[str] = Counter()
        self.staleness_hist: Counter[int] = Counter()
        self.actor_stats: dict[str, ActorStats] = {}
        self.records = 0
        self.sampled_groups = 0
        self.silent = ActorSilence()
        self.returns = CreditReturns(self.admission, self.assembler, self.drops, self._collect,
                                     clock)
        self.unsaved_episodes = UnsavedEpisodes(self.assembler, self.store, clock)

    @property
    def nbytes(self) -> int:
        return self.store.nbytes + self.assembler.nbytes

    # ---- data in ------------------------------------------------------------------------

    def ingest(
        self, msg: StepRecord | EpisodeEnd | ActorStats, sender: str | None = None
    ) -> None:
        """`sender`: the authenticated identity of the peer that sent `msg` (wire/roles.py),
        None when the transport does not authenticate."""
        self.records += 1
        if isinstance(msg, ActorStats):
            self._ingest_stats(msg, sender)
            return
        reason, detail = self._origin(msg, sender)
        if reason:  # not this sender's group: count it, touch nothing of the group's state
            self._count_refusal(reason, detail)
            return
        reason, detail = check_record(msg, self.bounds, self.version + 1)
        if reason:
            self._refuse(msg, reason, detail)
        else:
            if self.assembler.add(msg, self._clock()):
                self.admission.on_record(msg.group_id, msg.actor_id)
            self.unsaved_episodes.add(msg.episode_id, msg.group_id)
        self._collect()

    def _origin(self, msg: StepRecord | EpisodeEnd, sender: str | None) -> tuple[str, str]:
        """Why a record may not enter its group at all, or ("", ""): its authenticated sender
        is not its actor (`identity`), or its group was never granted to its actor
        (`ungranted`: were they admitted, each would take an admission credit, and a handful
        would stall a run for `episode_timeout_s`). Records of a group already closed pass,
        and assembly counts them `late_record`."""
        if roles.not_this_actor(sender, msg.actor_id):
            return "identity", f"record of actor {msg.actor_id!r} sent by {sender!r}"
        owner = self.admission.owner(msg.group_id)
        if owner is None and not self.assembler.closed(msg.group_id):
            return "ungranted", f"group {msg.group_id!r} was never granted"
        if owner is not None and owner != msg.actor_id:
            return "ungranted", f"group {msg.group_id!r} was granted to {owner!r}, not " \
                                f"{msg.actor_id!r}"
        return "", ""

    def _refuse(self, msg: StepRecord | EpisodeEnd, reason: str, detail: str) -> None:
        """Count a refused record; its episode can never be whole, so when its group holds a
        credit (granted or assembling) the episode is dropped now and a group left with
        nothing to wait for releases its credit at once (not after episode_timeout_s)."""
        self._count_refusal(reason, detail)
        if not (self.assembler.has_group(msg.group_id) or self.admission.holds(msg.group_id)):
            return  # a group nobody granted: nothing to release, nothing to remember
        # The group's size, so that it waits for its other episodes: the refused end's own
        # (when that field passed its check), else the run's bound.
        size = self.group_size
        if isinstance(msg, EpisodeEnd) and reason != "group_size":
            size = msg.group_size
        if self.assembler.reject(msg, self._clock(), size):
            self.admission.on_record(msg.group_id, msg.actor_id)

    def _count_refusal(self, reason: str, detail: str) -> None:
        self.drops["invalid_record"] += 1
        self.drops[f"invalid_record/{reason}"] += 1
        if self.drops["invalid_record"] <= 10 or self.drops["invalid_record"] % 1000 == 0:
            log.warning("buffer: record refused (%d so far): %s", self.drops["invalid_record"],
                        detail)

    def _ingest_stats(self, msg: ActorStats, sender: str | None = None) -> None:
        """Keep sane reports of at most `max_actors` actor ids (each id is a metrics key),
        each only from the actor it names when senders are authenticated."""
        reason = "identity" if roles.not_this_actor(sender, msg.actor_id) else ""
        reason = reason or check_stats(msg, self.version + 1)
        if reason:
            self.drops[f"invalid_stats/{reason}"] += 1
        elif msg.actor_id in self.actor_stats or len(self.actor_stats) < self._max_actors:
            self.actor_stats[msg.actor_id] = msg
            self.silent.report(msg.actor_id, msg.progress_age_s)
        else:
            self.drops["actor_stats_overflow"] += 1

    def tick(self) -> None:
        """Apply timeouts; call a few times per second."""
        now = self._clock()
        self.silent.tick(now)
        self.assembler.poll(now)
        self._collect()
        self.drops["expired_credit"] += len(self.admission.expire())
        self.returns.release_unclaimed(now)

    def reconcile(self, actor_id: str, held: list[str]) -> list[str]:
        """`actor_id` runs the groups `held` (`CreditReturns.reconcile`): the held groups that
        hold no credit of this actor, which it should stop."""
        return self.returns.reconcile(actor_id, held)

    def orphan_all(self) -> None:
        """Every actor that held a credit or an open episode is gone (a relaunch restored this
        buffer with fresh actors): expire their open episodes now and release their credits,
        instead of blocking admission until `episode_timeout_s` passes."""
        self.returns.orphan_all(self.cfg.episode_timeout_s + (self.cfg.group_wait_s or 0.0) + 1)
        self.silent.clear()

    def reclaim(self, actor_id: str) -> tuple[int, int]:
        """`reclaim_report` without what it discarded."""
        credits, episodes, _ = self.reclaim_report(actor_id)
        return credits, episodes

    def reclaim_report(self, actor_id: str) -> tuple[int, int, Loss]:
        """The launcher replaced `actor_id`'s process (it died, or showed no progress for
        `launch.unresponsive_s`): every credit it held comes back now instead of after
        `episode_timeout_s`, so the other actors get credits again. Its open episodes are
        dropped (`reclaimed_episode`), each of its groups closes as after `group_wait_s`
        (ready with `min_group_episodes` done, else `group_too_small`), and its late records
        count as `late_record`. Every credit it held counts once in `reclaimed_credit`. Its
        report and silence are forgotten: the next process is judged from its own first
        report. Returns (credits, episodes) reclaimed and what was discarded: the open
        episodes, and the finished ones of groups dropped as too small (or stale), with their
        steps and action tokens."""
        credits, episodes, loss = self.returns.reclaim(actor_id)
        self.silent.forget(actor_id)
        self.actor_stats.pop(actor_id, None)
        if loss.episodes:
            log.info("reclaimed %s: discarded %s", actor_id, loss.phrase())
        return credits, episodes, loss

    def silence(self) -> dict[str, float]:
        """Per tracked actor: listening seconds since its last progress (buffers/silence.py)."""
        return self.silent.seconds()

    def _collect(self) -> None:
        ready, dropped = self.assembler.drain()
        for gid in dropped:
            self.admission.on_dropped(gid)
        for rg in ready:
            if self._insert(describe(rg.group, rg.nbytes)):
                self.admission.on_accepted(rg.group.group_id)
            else:
                self.admission.on_dropped(rg.group.group_id)

    def _insert(self, entry: StoredGroup) -> bool:
        if self.store.is_stale(entry, self.version):
            self.drops["stale"] += 1
            self._dropped_untrained(entry, "stale")
            return False
        rule = self._zero_advantage_rule
        if rule is not None and zero_advantage(entry.group, *rule):
            self.drops[ZERO_ADVANTAGE] += 1
            self._dropped_untrained(entry, ZERO_ADVANTAGE)
            return False
        if not self.store.insert(entry):
            self.drops["duplicate_group"] += 1
            self._dropped_untrained(entry, "duplicate_group")
            return False
        self.limiter.on_insert()
        return True

    # ---- control ------------------------------------------------------------------------

    def grant(self, actor_id: str, max_groups: int, held: list[str] | None = None) -> CreditGrant:
        """Up to `max_groups` credits for `actor_id`, after reconciling the groups it says it
        runs (`held`; None: not said)."""
        unknown = [] if held is None else self.reconcile(actor_id, held)
        if self.nbytes >= self.cfg.max_bytes:
            return CreditGrant(actor_id, 0, self.version, reason="memory_full", unknown=unknown)
        by_staleness = self.admission.capacity()
        by_rate = self.limiter.insert_room(pending=self.admission.in_flight)
        ids = self.admission.grant(actor_id, min(max_groups, by_staleness, by_rate))
        if ids and (actor_id in self.silent or len(self.silent) < self._max_actors):
            self.silent.start(actor_id)  # holds credits: judged now
        reason = ""
        if len(ids) < max_groups:
            reason = "staleness" if by_staleness <= by_rate else "rate_limit"
        return CreditGrant(actor_id, len(ids), self.version, reason=reason, group_ids=ids,
                           unknown=unknown)

    def set_version(self, version: int) -> None:
        if version < self.version:
            # A learner restarted from an older checkpoint: the groups its lost updates trained
            # on are gone, and untrained in the new lineage. Admission must stop counting them
            # (accepted = trained + ready), or each restart shrinks the budget for good and a
            # small one (max_staleness 1) stalls the run.
            self.admission.rewind(version * self.admission.batch_groups + len(self.store))
        self.version = version
        self.store.set_version(version)
        for entry in self.store.drop_stale(version):
            self.drops["stale"] += 1
            self.limiter.on_remove(entry.times_sampled)
            if entry.times_sampled == 0:  # never trained: give its staleness budget back
                self.admission.on_discarded()
                self._dropped_untrained(entry, "stale")

    def try_sample(self, k: int, learner_version: int,
                   failed: int = 0) -> tuple[SampleBatch | None, str]:
        """A batch of k groups, or (None, why not yet); with up to `failed` of the failed
        episodes kept since the last batch that took some, newest first (`take_failed`)."""
        if learner_version != self.version:
            self.set_version(learner_version)
        else:
            self.set_version(self.version)  # the hard bound is checked at every sample
        if len(self.store) < max(k, self.cfg.min_groups_to_sample):
            why = f"{len(self.store)} groups ready, {k} requested"
            if self._zero_advantage_rule is not None:
                why += (f"; {self.drops[ZERO_ADVANTAGE]} groups dropped so far with every "
                        "advantage zero (algorithm.filter_groups)")
            return None, why
        if not self.limiter.can_sample(k, len(self.store)):
            return None, "rate_limit: samples would outrun inserts (samples_per_insert)"
        picked, weights, evicted = self.store.sample(k)
        self.limiter.on_sample(k)
        for entry in evicted:
            self.drops["reuse_exhausted"] += 1
            self.limiter.on_remove(entry.times_sampled)
        for entry in picked:
            for version, tokens in entry.token_versions.items():
                self.staleness_hist[self.version - version] += tokens
            if entry.times_sampled == 1:  # its first use: trained once, however often reused
                self.assembler.lengths.trained(entry.group.episodes)
        self.sampled_groups += k
        groups = [e.group for e in picked]
        return SampleBatch(groups, weights, self.version, failed=self.take_failed(failed)), ""

    def take_failed(self, n: int) -> list[Episode]:
        """Up to `n` of the failed episodes the assembler kept, newest first; they leave it."""
        kept = self.assembler.failed
        return [kept.pop() for _ in range(min(max(n, 0), len(kept)))]

    # ---- metrics and snapshots ----------------------------------------------------------

    def _dropped_untrained(self, entry: StoredGroup, reason: str) -> None:
        """A complete group dropped before its first sample: its episodes, by length."""
        for ep in entry.group.episodes:
            self.assembler.lengths.dropped(reason, ep.steps)

    def unsaved(self) -> Loss:
        """What a restart from the last snapshot would discard (buffers/unsaved.py)."""
        return self.unsaved_episodes.loss()

    def saved(self) -> None:
        """A snapshot of this buffer's state was written: it holds everything received."""
        self.unsaved_episodes.saved()

    def _drops_and_lengths(self) -> dict[str, int]:
        """`BufferStats.drops`: the drops by reason, the length ledger's counts and the
        unsaved gauge (both under `WIRE_PREFIX`, buffers/lengths.py)."""
        out = dict(self.drops + self.assembler.drops)
        out.update(self.assembler.lengths.wire())
        out.update({f"{WIRE_PREFIX}{UNSAVED}{k}": v for k, v in self.unsaved().to_counts().items()})
        return out

    def stats(self, ingest_rate: float = 0.0, records_per_frame: float = 0.0,
              sample_waiting: int = 0) -> BufferStats:
        """`sample_waiting`: groups a parked SampleRequest asks for (the service knows)."""
        episodes = self.store.episodes  # kept by the store: a stats request is O(1) in it
        return BufferStats(
            time=time.time(),
            learner_version=self.version,
            groups_ready=len(self.store),
            groups_assembling=self.assembler.groups_assembling,
            episodes_stored=episodes,
            bytes_stored=self.nbytes,
            in_flight_groups=self.admission.in_flight,
            accepted_groups=self.admission.accepted,
            sampled_groups=self.sampled_groups,
            drops=self._drops_and_lengths(),
            staleness_hist=dict(self.staleness_hist),
            ingest_records_per_s=ingest_rate,
            actors=dict(self.actor_stats),
            records_per_frame=records_per_frame,
            actor_silence_s=self.silence(),
            actor_credits=self.admission.per_actor(),
            sample_waiting=sample_waiting,
            records=self.records,
            episode_bytes_mean=self.store.nbytes / episodes if episodes else 0.0,
        )

    def state(self) -> BufferState:
        accepted, in_flight = self.admission.state()
        return BufferState(
            learner_version=self.version,
            stored=[StoredState(e.group, e.times_sampled) for e in self.store.entries()],
            assembling=self.assembler.export(),
            accepted=accepted,
            in_flight=in_flight,
            limiter=self.limiter.state(),
            drops=dict(self.drops + self.assembler.drops),
            staleness_hist=dict(self.staleness_hist),
            records=self.records,
            sampled_groups=self.sampled_groups,
            lengths=self.assembler.lengths.export(),
        )

    def restore(self, state: BufferState) -> None:
        """Resume from `state` (into a fresh buffer); timers restart now."""
        self.version = state.learner_version
        self.store.set_version(self.version)
        for s in state.stored:
            nbytes = sum(episode_nbytes(ep) for ep in s.group.episodes)
            self.store.insert(describe(s.group, nbytes, s.times_sampled))
        self.assembler.restore(state.assembling, self._clock())
        self.admission.restore(state.accepted, state.in_flight)
        self.returns.restored_at = self._clock()
        for _, actor_id, _ in state.in_flight:  # its credits are back: judged from now
            self.silent.start(actor_id)
        self.limiter.restore(*state.limiter)
        self.drops.clear()  # in place: the credit returns count into it too
        self.drops.update(state.drops)
        self.staleness_hist = Counter(state.staleness_hist)
        self.records, self.sampled_groups = state.records, state.sampled_groups
        self.assembler.lengths.restore(state.lengths)

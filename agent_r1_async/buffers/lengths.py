"""Episode lengths at the buffer: what was generated, trained and dropped, by length bucket,
and what a restart discards.

Dropping stale data can bias training toward short episodes: a long episode's group takes
longer to complete, so its oldest tokens are older when it is stored and it is the first to go
stale. The buffer counts, per length bucket, what reaches it and what it hands to the learner,
so the bias shows.

A length bucket is the smallest power of two at or above an episode's number of steps (`le_1`,
`le_2`, `le_4`, `le_8`, ...; the `world` env's `horizon_bucket` applies the same rule to its
plan length), capped at the bucket of `env.max_turns`, so each series has at most
log2(max_turns) + 2 keys.

- generated: every episode whose EpisodeEnd reached assembly, trainable or not, counted once
  when assembly is done with it, at its end's `num_steps`. An episode cut before its end
  (expired, reclaimed, abandoned, rejected) has no known length: it is only in `dropped`.
- trained: the episodes of each group handed to the learner, at the group's first sample (a
  group sampled again, up to `buffer.max_reuse` times, counts once).
- dropped: each episode dropped, by reason (the episode reasons of `drops`; `group_too_small`
  for the finished episodes of a group dropped as too small; `stale` and `duplicate_group` for
  the episodes of a group dropped before it was ever sampled), at the steps received so far,
  with those steps' action tokens per reason.

All are totals since the run began (kept in the buffer's snapshots), like `drops`.
`BufferStats.drops` carries them under `WIRE_PREFIX`; `length_metrics` turns them into the
logged keys (run/output/metric_names.py).

`Loss` is what one event discarded (a reclaim, a learner restart, a buffer restart): episodes,
their steps and action tokens, and the episodes by length bucket, in one console phrase.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_r1_async.wire.messages import Episode, StepRecord

WIRE_PREFIX = "length/"
"""`BufferStats.drops` keys under this prefix are the ledger's counts and the unsaved gauge,
not drops (`length_metrics` takes them out)."""
UNSAVED = "unsaved/"
"""Under `WIRE_PREFIX`: what the buffer received since its last snapshot, as a `Loss`
(`Loss.to_counts`): a restart from that snapshot would discard it."""

_SERIES = ("generated", "generated_steps", "trained", "trained_steps")


def length_bucket(steps: int, max_steps: int = 0) -> int:
    """The smallest power of two at or above `steps` (at least 1), capped at the bucket of
    `max_steps` (`env.max_turns`; 0: no cap)."""
    bucket = 1 << max(steps - 1, 0).bit_length()
    if max_steps > 0:
        bucket = min(bucket, 1 << max(max_steps - 1, 0).bit_length())
    return bucket


def action_tokens(steps: Iterable[StepRecord]) -> int:
    return sum(len(s.action_ids) for s in steps)


def bucket_of(key: str) -> int | None:
    """8 for a key ending in `/le_8`, else None."""
    _, _, last = key.rpartition("/")
    if last.startswith("le_") and last[3:].isdigit():
        return int(last[3:])
    return None


class LengthLedger:
    """Counts episodes generated, trained and dropped by length bucket (module docstring).

    `counts` holds the flat keys that travel and are snapshotted: `generated/le_<b>`,
    `generated_steps/le_<b>`, `trained/le_<b>`, `trained_steps/le_<b>`,
    `dropped/<reason>/le_<b>` (episodes), `dropped_steps/<reason>/le_<b>`,
    `dropped_tokens/<reason>`. While `journal` is a list, every drop is also appended to it
    as (reason, steps, tokens): a caller measures what one operation discarded."""

    def __init__(self, max_steps: int = 0) -> None:
        self.max_steps = max_steps
        self.counts: Counter[str] = Counter()
        self.journal: list[tuple[str, int, int]] | None = None

    def bucket(self, steps: int) -> int:
        return length_bucket(steps, self.max_steps)

    def generated(self, num_steps: int) -> None:
        steps = max(num_steps, 0)
        b = self.bucket(steps)
        self.counts[f"generated/le_{b}"] += 1
        self.counts[f"generated_steps/le_{b}"] += steps

    def trained(self, episodes: Iterable[Episode]) -> None:
        for ep in episodes:
            steps = len(ep.steps)
            b = self.bucket(steps)
            self.counts[f"trained/le_{b}"] += 1
            self.counts[f"trained_steps/le_{b}"] += steps

    def dropped(self, reason: str, steps: Collection[StepRecord]) -> None:
        """One episode dropped for `reason`, with the steps received of it."""
        n, tokens = len(steps), action_tokens(steps)
        b = self.bucket(n)
        self.counts[f"dropped/{reason}/le_{b}"] += 1
        self.counts[f"dropped_steps/{reason}/le_{b}"] += n
        self.counts[f"dropped_tokens/{reason}"] += tokens
        if self.journal is not None:
            self.journal.append((reason, n, tokens))

    def export(self) -> dict[str, int]:
        """The non-zero counts (for a snapshot)."""
        return {k: v for k, v in self.counts.items() if v}

    def restore(self, counts: Mapping[str, int]) -> None:
        self.counts = Counter({k: int(v) for k, v in counts.items() if v})

    def wire(self) -> dict[str, int]:
        """The counts under `WIRE_PREFIX`, the generated and trained series with every bucket
        up to the top one (that of `max_steps`, else the largest seen) present, 0 or not."""
        seen = [b for k in self.counts if (b := bucket_of(k)) is not None]
        top = self.bucket(self.max_steps) if self.max_steps > 0 else max(seen, default=1)
        out = {f"{WIRE_PREFIX}{k}": v for k, v in self.counts.items() if v}
        b = 1
        while b <= top:
            for series in _SERIES:
                out.setdefault(f"{WIRE_PREFIX}{series}/le_{b}", 0)
            b *= 2
        return out


@dataclass
class Loss:
    """What one event discarded: episodes, their steps received and action tokens, and the
    episodes by length bucket (of their steps received)."""

    episodes: int = 0
    steps: int = 0
    tokens: int = 0
    buckets: Counter[int] = field(default_factory=Counter)

    def add(self, steps: int, tokens: int, max_steps: int = 0, episodes: int = 1) -> None:
        self.episodes += episodes
        self.steps += steps
        self.tokens += tokens
        self.buckets[length_bucket(steps, max_steps)] += episodes

    def __add__(self, other: Loss) -> Loss:
        return Loss(self.episodes + other.episodes, self.steps + other.steps,
                    self.tokens + other.tokens, self.buckets + other.buckets)

    @classmethod
    def from_journal(cls, journal: Iterable[tuple[str, int, int]], max_steps: int = 0) -> Loss:
        loss = cls()
        for _, steps, tokens in journal:
            loss.add(steps, tokens, max_steps)
        return loss

    def to_counts(self) -> dict[str, int]:
        """Flat, for Ray and the wire: `discarded`, `steps`, `tokens`, `le_<b>`."""
        out = {"discarded": self.episodes, "steps": self.steps, "tokens": self.tokens}
        out.update({f"le_{b}": n for b, n in sorted(self.buckets.items()) if n})
        return out

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> Loss:
        """The inverse of `to_counts` (other keys are ignored; missing ones are 0)."""
        buckets: Counter[int] = Counter()
        for k, v in counts.items():
            b = bucket_of(k)
            if b is not None and v:
                buckets[b] += int(v)
        return cls(int(counts.get("discarded", 0)), int(counts.get("steps", 0)),
                   int(counts.get("tokens", 0)), buckets)

    @classmethod
    def between(cls, before: Mapping[str, int], after: Mapping[str, int]) -> Loss:
        """What was dropped between two `BufferStats.drops` (the ledger's wire keys), by
        bucket; a counter that went down (a buffer restored from an older snapshot in between)
        counts 0."""

        def grew(key: str) -> int:
            return max(0, int(after.get(key, 0)) - int(before.get(key, 0)))

        loss = cls()
        for key in after:
            if not key.startswith(WIRE_PREFIX):
                continue
            name = key[len(WIRE_PREFIX):]
            b = bucket_of(name)
            if name.startswith("dropped/") and b is not None:
                n = grew(key)
                loss.episodes += n
                if n:
                    loss.buckets[b] += n
            elif name.startswith("dropped_steps/"):
                loss.steps += grew(key)
            elif name.startswith("dropped_tokens/"):
                loss.tokens += grew(key)
        return loss

    def phrase(self) -> str:
        """`3 episodes (41 steps: 2 of <=4, 1 of <=32; 5,210 generated tokens)`, or
        `no episode`."""
        if not self.episodes:
            return "no episode"
        lengths = ", ".join(f"{n} of <={b}" for b, n in sorted(self.buckets.items()) if n)
        noun = "episode" if self.episodes == 1 else "episodes"
        return (f"{self.episodes} {noun} ({self.steps} steps: {lengths}; "
                f"{self.tokens:,} generated tokens)")


def length_metrics(drops: Mapping[str, int]) -> dict[str, float]:
    """The logged keys of the ledger's and the unsaved gauge's wire counts in `drops`:

    - `episodes/generated/le_<b>`, `episodes/generated_steps/le_<b>`, `episodes/trained/le_<b>`,
      `episodes/trained_steps/le_<b>`, `episodes/dropped/le_<b>`, `episodes/dropped_steps/le_<b>`
      (episodes and their steps per bucket; dropped summed over the reasons);
    - `episodes/generated_steps_mean`, `episodes/trained_steps_mean`: mean steps of the
      generated and of the trained episodes, and `episodes/trained_length_ratio`, the second
      over the first (1.0: no length bias), once both have an episode;
    - `buffer/drops_by_len/<reason>/le_<b>` (episodes), `buffer/drops_steps/<reason>`,
      `buffer/drops_tokens/<reason>` (their steps and action tokens);
    - `buffer/unsaved_episodes`, `buffer/unsaved_steps`, `buffer/unsaved_tokens`: what the
      buffer received since its last snapshot (a restart from it would discard that).
    """
    out: dict[str, float] = {}
    totals: Counter[str] = Counter()
    unsaved: dict[str, int] = {}
    for key, value in drops.items():
        if not key.startswith(WIRE_PREFIX):
            continue
        name, v = key[len(WIRE_PREFIX):], int(value)
        if name.startswith(UNSAVED):
            unsaved[name[len(UNSAVED):]] = v
            continue
        series, _, rest = name.partition("/")
        b = bucket_of(name)
        if series in _SERIES and b is not None:
            out[f"episodes/{name}"] = v
            totals[series] += v
        elif series in ("dropped", "dropped_steps") and b is not None:
            reason = rest.rpartition("/")[0]
            out[f"episodes/{series}/le_{b}"] = out.get(f"episodes/{series}/le_{b}", 0) + v
            if series == "dropped":
                out[f"buffer/drops_by_len/{reason}/le_{b}"] = v
            else:
                out[f"buffer/drops_steps/{reason}"] = out.get(f"buffer/drops_steps/{reason}",
                                                              0) + v
        elif series == "dropped_tokens":
            out[f"buffer/drops_tokens/{rest}"] = v
    for series in ("dropped", "dropped_steps"):  # every bucket the generated series has
        for key in [k for k in out if k.startswith("episodes/generated/")]:
            out.setdefault(f"episodes/{series}/{key.rpartition('/')[2]}", 0)
    if totals["generated"]:
        out["episodes/generated_steps_mean"] = totals["generated_steps"] / totals["generated"]
    if totals["trained"]:
        out["episodes/trained_steps_mean"] = totals["trained_steps"] / totals["trained"]
    if totals["generated"] and totals["trained"] and totals["generated_steps"]:
        out["episodes/trained_length_ratio"] = (
            out["episodes/trained_steps_mean"] / out["episodes/generated_steps_mean"])
    if unsaved:
        loss = Loss.from_counts(unsaved)
        out["buffer/unsaved_episodes"] = loss.episodes
        out["buffer/unsaved_steps"] = loss.steps
        out["buffer/unsaved_tokens"] = loss.tokens
    return out

"""The store of complete groups: prioritized (sum-tree) or FIFO sampling, staleness bound.

Priority of group i (learner at version v):

    p_i = ((std of its episodes' returns + priority_eps) × freshness_decay ** (v − age_i)) ** α
    P(i) = p_i / Σ_j p_j          w_i = (N·P(i))^−β / max_j∈batch (N·P(j))^−β

- The advantage signal is the population std of the episodes' returns (outcome reward + process
  rewards): a group whose returns are all equal has zero GRPO advantage and teaches nothing,
  so it gets only the floor `priority_eps` (rarely drawn, but not never).
- age_i is the version the staleness bound reads (`buffer.staleness_from`), staleness =
  v − age_i:
  - `newest_token` (default): the version of the group's newest action token, about the
    learner's version when the group completed. A long episode spans weight updates (each of
    its tokens carries the version that sampled it, and the importance weight corrects the
    older ones); what the bound limits is how long the group waits in the buffer, which does
    not depend on its length.
  - `oldest_token`: the version of its oldest action token, the strictest reading. An episode
    that spans more than max_staleness updates can never be trained, so long episodes are
    dropped far more often than short ones (bench/bench_staleness_bias.py measures it).
- A version bump multiplies every p_i by the same factor freshness_decay^(α·Δv), which leaves
  P(i) unchanged. So leaves hold priorities relative to a reference version R and are
  recomputed only when v drifts more than `_REBASE_EVERY` from R (keeps floats in range).
- Hard bound: a group is too stale when age_i < v − max_staleness. It is dropped, never
  trained.
- Sampling is without replacement within a batch. After `max_reuse` samples a group is evicted.
- Due first: a group whose age is v − max_staleness is stale after this update, so a batch
  takes such groups first (highest priority first), then draws the rest by priority. Priority
  orders what is trained sooner; it does not let a group expire that the learner could still
  train. The importance weights use every picked group's P(i) as above.
- FIFO mode: the oldest groups first; a group that may be reused goes to the back.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

from agent_r1_async.buffers.sumtree import SumTree
from agent_r1_async.wire.messages import Group

_REBASE_EVERY = 32


@dataclass
class StoredGroup:
    group: Group
    nbytes: int
    version: int
    """Oldest policy version of any of its steps (or action tokens)."""
    newest: int
    """Newest policy version of any of its steps (or action tokens)."""
    signal: float
    """Std of the episodes' returns (the advantage signal, before priority_eps)."""
    token_versions: Counter[int]
    """Action tokens per policy version (for the token-weighted staleness histogram)."""
    times_sampled: int = 0


def describe(group: Group, nbytes: int, times_sampled: int = 0) -> StoredGroup:
    """Compute the versions and advantage signal of a group."""
    tokens: Counter[int] = Counter()
    returns = []
    for ep in group.episodes:
        for step in ep.steps:
            if step.token_versions and len(step.token_versions) == len(step.action_ids):
                tokens.update(step.token_versions)
            else:
                tokens[step.policy_version] += len(step.action_ids)
            tokens[step.policy_version] += 0  # a step with no action tokens still has a version
        returns.append(ep.end.outcome_reward + sum(s.process_reward for s in ep.steps))
    if not tokens:
        raise ValueError(f"group {group.group_id!r} has no steps")
    mean = sum(returns) / len(returns)  # population std (statistics.pstdev is 20x slower)
    signal = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    return StoredGroup(group, nbytes, min(tokens), max(tokens), signal, tokens, times_sampled)


class GroupStore:
    def __init__(
        self,
        mode: str,
        alpha: float,
        beta: float,
        freshness_decay: float,
        priority_eps: float,
        max_staleness: int,
        max_reuse: int,
        seed: int = 0,
        staleness_from: str = "newest_token",
    ) -> None:
        if mode not in ("prioritized", "fifo"):
            raise ValueError(f"buffer.sampling must be 'prioritized' or 'fifo', got {mode!r}")
        if staleness_from not in ("newest_token", "oldest_token"):
            raise ValueError("buffer.staleness_from must be 'newest_token' or 'oldest_token', "
                             f"got {staleness_from!r}")
        self.oldest = staleness_from == "oldest_token"
        self.mode = mode
        self.alpha, self.beta = alpha, beta
        self.freshness_decay, self.priority_eps = freshness_decay, priority_eps
        self.max_staleness, self.max_reuse = max_staleness, max_reuse
        self.nbytes = 0
        self.episodes = 0  # episodes of the stored groups (kept, not counted per request)
        self._rng = random.Random(seed)
        self._tree = SumTree()
        self._ref = 0  # reference version R of the stored priorities
        self.version = 0  # the learner's, as last set
        self._entries: dict[int, StoredGroup] = {}  # slot -> group
        self._slot: dict[str, int] = {}  # group_id -> slot, in insertion (FIFO) order
        self._by_version: dict[int, set[str]] = {}  # age version -> group ids

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._slot

    def get(self, group_id: str) -> StoredGroup | None:
        slot = self._slot.get(group_id)
        return None if slot is None else self._entries[slot]

    def entries(self) -> list[StoredGroup]:
        """Stored groups, oldest insert first."""
        return [self._entries[s] for s in self._slot.values()]

    def age(self, entry: StoredGroup) -> int:
        """The version the staleness bound and the freshness priority read (age_i)."""
        return entry.version if self.oldest else entry.newest

    def priority(self, entry: StoredGroup) -> float:
        """p_i relative to the reference version (see the module docstring)."""
        # Clamped exponent and floor: extreme configs must not overflow or reach priority 0.
        staleness = min(max(self._ref - self.age(entry), -2 * _REBASE_EVERY), 1000)
        fresh = self.freshness_decay**staleness
        p: float = ((entry.signal + self.priority_eps) * fresh) ** self.alpha  # base > 0: real
        return max(p, 1e-300)

    def insert(self, entry: StoredGroup) -> bool:
        """Store a group; False if its id is already stored."""
        gid = entry.group.group_id
        if gid in self._slot:
            return False
        slot = self._tree.add(self.priority(entry))
        self._entries[slot] = entry
        self._slot[gid] = slot
        self._by_version.setdefault(self.age(entry), set()).add(gid)
        self.nbytes += entry.nbytes
        self.episodes += len(entry.group.episodes)
        return True

    def remove(self, group_id: str) -> StoredGroup:
        slot = self._slot.pop(group_id)
        entry = self._entries.pop(slot)
        self._tree.remove(slot)
        ids = self._by_version[self.age(entry)]
        ids.discard(group_id)
        if not ids:
            del self._by_version[self.age(entry)]
        self.nbytes -= entry.nbytes
        self.episodes -= len(entry.group.episodes)
        return entry

    def is_stale(self, entry: StoredGroup, learner_version: int) -> bool:
        return self.age(entry) < learner_version - self.max_staleness

    def drop_stale(self, learner_version: int) -> list[StoredGroup]:
        """Remove every group whose age is below learner_version − max_staleness."""
        oldest_ok = learner_version - self.max_staleness
        stale = [gid for v, ids in self._by_version.items() if v < oldest_ok for gid in ids]
        return [self.remove(gid) for gid in stale]

    def sample(self, k: int) -> tuple[list[StoredGroup], list[float], list[StoredGroup]]:
        """Draw k distinct groups: (groups, importance weights, groups evicted after max_reuse).

        The caller drops stale groups first (`drop_stale`) and checks that k <= len(self).
        """
        if not 0 < k <= len(self):
            raise ValueError(f"cannot sample {k} groups from {len(self)} stored")
        if self.mode == "fifo":
            picked = [self._entries[s] for s in list(self._slot.values())[:k]]
            weights = [1.0] * k
        else:
            due = sorted((self._slot[gid] for gid in
                          self._by_version.get(self.version - self.max_staleness, ())),
                         key=self._tree.get, reverse=True)[:k]
            slots = due + self._tree.sample(k - len(due), self._rng, exclude=due)
            total, n = self._tree.total, len(self)
            raw = [(n * self._tree.get(s) / total) ** -self.beta for s in slots]
            top = max(raw)
            weights = [w / top for w in raw]
            picked = [self._entries[s] for s in slots]
        evicted = []
        for entry in picked:
            entry.times_sampled += 1
            gid = entry.group.group_id
            if entry.times_sampled >= self.max_reuse:
                evicted.append(self.remove(gid))
            elif self.mode == "fifo":  # reusable: to the back of the line
                self._slot[gid] = self._slot.pop(gid)
        return picked, weights, evicted

    def set_version(self, learner_version: int) -> None:
        """Follow the learner version (re-bases the stored priorities when it drifted far)."""
        self.version = learner_version
        if abs(learner_version - self._ref) <= _REBASE_EVERY:
            return
        self._ref = learner_version
        for slot, entry in self._entries.items():
            self._tree.update(slot, self.priority(entry))

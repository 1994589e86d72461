"""What a stream of actor records, and a ledger of sampled groups, must satisfy."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from agent_r1_async.wire import messages as m


@dataclass
class Stream:
    """Everything one actor sent, in arrival order, checked by `check`."""

    steps: dict[str, list[m.StepRecord]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[str, list[m.EpisodeEnd]] = field(default_factory=lambda: defaultdict(list))
    stats: list[m.ActorStats] = field(default_factory=list)
    arrival: list[tuple[float, m.StepRecord]] = field(default_factory=list)
    published_at: float | None = None
    """When a test published new weights (for checks of the versions that follow)."""

    def add(self, frames: list) -> list[m.StepRecord | m.EpisodeEnd | m.ActorStats]:
        """Record the messages of one received message (a plain one or a DataBatch's items)."""
        msgs = list(m.unpack_data(frames))
        for msg in msgs:
            if isinstance(msg, m.StepRecord):
                self.steps[msg.episode_id].append(msg)
                self.arrival.append((time.time(), msg))
            elif isinstance(msg, m.EpisodeEnd):
                self.ends[msg.episode_id].append(msg)
            else:
                self.stats.append(msg)
        return msgs

    def check(self, group_size: int) -> None:
        """Contiguous steps, exactly one end per episode (after its steps), full groups."""
        assert set(self.steps) <= set(self.ends), "steps of an episode that never ended"
        groups: dict[str, int] = defaultdict(int)
        for eid, ends in self.ends.items():
            assert len(ends) == 1, f"episode {eid} has {len(ends)} end records"
            steps = self.steps.get(eid, [])
            assert [s.step_index for s in steps] == list(range(len(steps)))
            assert ends[0].num_steps == len(steps)
            groups[ends[0].group_id] += 1
            for s in steps:
                assert len(s.behavior_logprobs) == len(s.action_ids) > 0
                assert all(lp <= 0.0 for lp in s.behavior_logprobs)
                assert s.group_id == ends[0].group_id
        assert all(n == group_size for n in groups.values()), dict(groups)


@dataclass
class Ledger:
    """Which episode ids were sampled how often, and checks on every sampled episode."""

    sampled: Counter[str]
    groups: Counter[str]

    @classmethod
    def empty(cls) -> Ledger:
        return cls(Counter(), Counter())

    def add(self, batch: m.SampleBatch) -> None:
        for g in batch.groups:
            self.groups[g.group_id] += 1
            for ep in g.episodes:
                check_complete(ep)
                self.sampled[ep.end.episode_id] += 1


def check_complete(ep: m.Episode) -> None:
    """A sampled episode is whole: steps 0..n-1 of one episode, an end record that agrees."""
    end = ep.end
    assert end.status in m.TRAINABLE_STATUSES, end
    assert [s.step_index for s in ep.steps] == list(range(end.num_steps)), end.episode_id
    assert all(s.episode_id == end.episode_id and s.group_id == end.group_id for s in ep.steps)
    for s in ep.steps:
        assert len(s.behavior_logprobs) == len(s.action_ids)

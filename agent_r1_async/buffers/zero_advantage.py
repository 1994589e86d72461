"""Groups that teach nothing: every advantage a group baseline gives them is zero.

GRPO and RLOO compare each episode's return with the other members' of its group (per step
index under `algorithm.credit: step`, the episode return under `token`;
learner/advantages.py). When every compared column holds equal returns, say all eight episodes
answered correctly, every advantage is 0: the update spends its forward and backward on no
policy gradient. With `algorithm.filter_groups` the buffer drops such a group when it
completes (reason `zero_advantage`, counted by length like any drop) and releases its credit,
so an actor starts another group in its place and every batch carries a learning signal:
DAPO's dynamic sampling, done where the group completes rather than by over-sampling batches.

The rule reads what the learner will train: a group's trainable episodes (status `ok` or
`truncated`, with steps), rewards r_t = process reward of step t plus the outcome on the last
step, returns G_t = Σ_{k≥t} γ^(k−t) r_k, and equal returns are those within 1e-9 of each
other (returns.py: the learner's advantages for them are exactly 0).
"""

from __future__ import annotations

from agent_r1_async.returns import discounted_returns, equal, step_rewards
from agent_r1_async.wire.messages import TRAINABLE_STATUSES, Episode, Group


def returns_to_go(episode: Episode, gamma: float) -> list[float]:
    """G_t for each step of `episode`, in step order."""
    steps = sorted(episode.steps, key=lambda s: s.step_index)
    return discounted_returns(step_rewards([s.process_reward for s in steps],
                                           episode.end.outcome_reward), gamma)


def zero_advantage(group: Group, credit: str, gamma: float) -> bool:
    """Whether every group-baseline advantage of `group` is zero (module docstring)."""
    returns = [returns_to_go(e, gamma) for e in group.episodes
               if e.steps and e.end.status in TRAINABLE_STATUSES]
    if len(returns) < 2:
        return True  # nothing to compare with: GRPO and RLOO both give 0
    if credit == "token":
        columns = [[g[0] for g in returns]]
    else:
        columns = [[g[t] for g in returns if len(g) > t]
                   for t in range(max(len(g) for g in returns))]
    return all(equal(c) for c in columns)

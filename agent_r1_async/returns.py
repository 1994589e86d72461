"""Returns, and when two of them are equal: one rule for the learner and the buffer.

The learner's advantages (learner/advantages.py) and the buffer's zero-advantage filter
(buffers/zero_advantage.py, `algorithm.filter_groups`) read an episode's returns-to-go the same
way (r_t = the step's process reward, plus the outcome on the last step; G_t = r_t +
γ G_{t+1}), and must agree on when a group's returns teach nothing. Float sums
of equal rewards taken in another order differ in their last bits (0.95 summed eight times and
divided by eight is not 0.95), and GRPO's std normalization would turn that noise into
advantages of up to ~1e-3. Returns within `EQUAL_RETURNS` of each other are therefore equal:
their advantages are exactly 0, the learner leaves those rows out of its forward and backward
(`learner.skip_zero_advantage`), and the buffer may drop the group. Rewards that mean something
differ by far more.
"""

from __future__ import annotations

from collections.abc import Sequence

EQUAL_RETURNS = 1e-9
"""Returns closer than this are equal."""


def step_rewards(process_rewards: Sequence[float], outcome_reward: float) -> list[float]:
    """r_t = process reward of step t, plus the outcome on the last step."""
    if not process_rewards:
        raise ValueError("an episode needs at least one step to carry its outcome reward")
    rewards = [float(r) for r in process_rewards]
    rewards[-1] += float(outcome_reward)
    return rewards


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + γ G_{t+1}, G_T = 0 (computed backwards)."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def equal(values: Sequence[float]) -> bool:
    """Whether `values` (one column of returns) are all equal, within `EQUAL_RETURNS`."""
    return max(values) - min(values) <= EQUAL_RETURNS

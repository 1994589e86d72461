"""Returns and advantages: pure functions over per-step rewards, no model, no torch.

Shapes are nested lists because episodes of one group may have different numbers of steps:
`Nested = list[list[list[float]]]` indexed `[group][episode][step]`.

Rewards. Step t of an episode earns r_t = process_reward_t, plus the outcome reward on the
last step. The step return is G_t = Σ_{k≥t} γ^(k-t) r_k.

Baselines (design choice). GRPO, REINFORCE++ and RLOO build their baseline and scale from the
*episode* returns G_0 (one number per episode, the quantity the group shares a start state
for); the thing compared against it is the step return G_t (`credit: step`) or the episode
return G_0 (`credit: token`). With outcome-only rewards and γ = 1, G_t = G_0 for every step,
so step and token credit coincide and both equal textbook GRPO / RLOO / REINFORCE++.
- GRPO:        A = (G − mean_group G_0) / (std_group G_0 + eps)   (std optional)
- REINFORCE++: A = (G − mean_batch G_0) / (std_batch G_0 + eps)   (std optional)
- RLOO:        A = G − mean_{other episodes of the group} G_0       (0 for a lone episode)
- PPO:         step-level GAE from V(s_t), δ_t = r_t + γ V(s_{t+1}) − V(s_t), V(s_T) = 0
Stds are population stds (a group with equal returns gets A = 0, never a division by zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Nested = list[list[list[float]]]
"""Per-step numbers indexed [group][episode][step]."""

STD_EPS = 1e-6


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


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    return mean, math.sqrt(var)


def _target(returns: list[float], credit: str) -> list[float]:
    """What a baseline is subtracted from: each G_t (step credit) or G_0 everywhere (token)."""
    return list(returns) if credit == "step" else [returns[0]] * len(returns)


def grpo_advantages(
    returns: Nested, credit: Literal["step", "token"] = "step", std_normalize: bool = True
) -> Nested:
    """Group-normalized advantages: baseline and scale from the group's episode returns."""
    out: Nested = []
    for group in returns:
        mean, std = _mean_std([ep[0] for ep in group])
        scale = std + STD_EPS if std_normalize else 1.0
        out.append([[(g - mean) / scale for g in _target(ep, credit)] for ep in group])
    return out


def reinforce_pp_advantages(
    returns: Nested, credit: Literal["step", "token"] = "step", std_normalize: bool = True
) -> Nested:
    """REINFORCE++: baseline and scale from all episode returns of the batch."""
    mean, std = _mean_std([ep[0] for group in returns for ep in group])
    scale = std + STD_EPS if std_normalize else 1.0
    return [[[(g - mean) / scale for g in _target(ep, credit)] for ep in group] for group in returns]


def rloo_advantages(returns: Nested, credit: Literal["step", "token"] = "step") -> Nested:
    """Leave-one-out: baseline = mean episode return of the *other* episodes of the group."""
    out: Nested = []
    for group in returns:
        n = len(group)
        total = sum(ep[0] for ep in group)
        adv_group = []
        for ep in group:
            if n < 2:  # no other episode to compare with: no learning signal
                adv_group.append([0.0] * len(ep))
                continue
            baseline = (total - ep[0]) / (n - 1)
            adv_group.append([g - baseline for g in _target(ep, credit)])
        out.append(adv_group)
    return out


def gae(
    rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    """Step-level GAE for one episode; returns (advantages, value targets = A_t + V_t).

    The episode's end is terminal (V(s_T) = 0): truncated episodes are not bootstrapped.
    """
    if len(rewards) != len(values):
        raise ValueError(f"gae: {len(rewards)} rewards but {len(values)} values")
    adv = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, [a + v for a, v in zip(adv, values, strict=True)]


def episode_level(advantages: Nested) -> Nested:
    """Token credit for PPO-style per-step numbers: every step gets the episode's first value."""
    return [[[ep[0]] * len(ep) for ep in group] for group in advantages]


def compute_advantages(
    returns: Nested,
    name: Literal["grpo", "reinforce_pp", "rloo"],
    credit: Literal["step", "token"] = "step",
    std_normalize: bool = True,
) -> Nested:
    """Dispatch on `algorithm.name` for the critic-free estimators (PPO uses `gae`)."""
    if any(not ep for group in returns for ep in group):
        raise ValueError("every episode needs at least one step")
    if name == "grpo":
        return grpo_advantages(returns, credit, std_normalize)
    if name == "reinforce_pp":
        return reinforce_pp_advantages(returns, credit, std_normalize)
    if name == "rloo":
        return rloo_advantages(returns, credit)
    raise ValueError(f"algorithm.name: no critic-free advantage estimator named {name!r}")

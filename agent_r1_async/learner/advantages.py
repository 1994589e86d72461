"""Returns and advantages: pure functions over per-step rewards, no model, no torch.

Shapes are nested lists because episodes of one group may have different numbers of steps:
`Nested = list[list[list[float]]]` indexed `[group][episode][step]`.

Rewards (returns.py). Step t of an episode earns r_t = process_reward_t, plus the outcome
reward on the last step. The step return is G_t = Σ_{k≥t} γ^(k-t) r_k.

Baselines (design choice). `credit: token` gives every step of an episode the episode's
advantage, from its return G_0 against the group's (GRPO, RLOO) or the batch's (REINFORCE++)
episode returns — textbook GRPO / RLOO / REINFORCE++. `credit: step` credits step t with its
return-to-go G_t only (a process reward earned at step t does not credit later steps), against
the return-to-go of the *same step index* in the other episodes of the group (batch) that
reached it: step-indexed baselines, as turn-level GRPO does. Comparing G_t with the episode
returns G_0 instead would be biased by the rewards collected before t, and in a group whose
episodes all scored alike it would divide that bias by the std epsilon. With outcome-only
rewards, γ = 1 and episodes of equal length both credits give the same numbers.
- GRPO:        A_t = (G_t − mean_t) / (std_t + eps)   over the group's episodes with a step t
- REINFORCE++: the same over the batch
- RLOO:        A_t = G_t − mean of G_t over the *other* episodes with a step t (0 when none)
  (token credit: t = 0 everywhere, G_0 on every step)
- PPO:         step-level GAE from V(s_t), δ_t = r_t + γ V(s_{t+1}) − V(s_t), V(s_T) = 0
Stds are population stds. A column (one step index's returns, or the episode returns) of
equal returns (returns.py `equal`: within 1e-9, float noise) gets A = 0 exactly, never noise
divided by the std epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from agent_r1_async.returns import equal

Nested = list[list[list[float]]]
"""Per-step numbers indexed [group][episode][step]."""

STD_EPS = 1e-6


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    return mean, math.sqrt(var)


Column = Callable[[list[float]], list[float]]
"""Advantages for one column of returns (one value per episode), same order."""


def _by_step_index(episodes: list[list[float]], credit: str, column: Column) -> list[list[float]]:
    """Apply `column` to each step index's returns over the episodes that reached it (step
    credit), or to the episode returns G_0, broadcast over each episode's steps (token credit)."""
    if credit != "step":
        first = column([ep[0] for ep in episodes])
        return [[a] * len(ep) for a, ep in zip(first, episodes, strict=True)]
    out = [[0.0] * len(ep) for ep in episodes]
    for t in range(max(len(ep) for ep in episodes)):
        reached = [i for i, ep in enumerate(episodes) if len(ep) > t]
        for i, a in zip(reached, column([episodes[i][t] for i in reached]), strict=True):
            out[i][t] = a
    return out


def _standardized(std_normalize: bool) -> Column:
    """(x − mean) / (std + eps), or x − mean without std normalization; 0 for equal returns."""
    def column(values: list[float]) -> list[float]:
        if equal(values):
            return [0.0] * len(values)
        mean, std = _mean_std(values)
        scale = std + STD_EPS if std_normalize else 1.0
        return [(v - mean) / scale for v in values]
    return column


def _leave_one_out(values: list[float]) -> list[float]:
    """v − mean of the other values; all 0 when there is no other value or all are equal."""
    n = len(values)
    if n < 2 or equal(values):
        return [0.0] * n  # nothing to compare with: no learning signal
    total = sum(values)
    return [v - (total - v) / (n - 1) for v in values]


def grpo_advantages(
    returns: Nested, credit: Literal["step", "token"] = "step", std_normalize: bool = True
) -> Nested:
    """Group-normalized advantages (step credit: per step index; token credit: per episode)."""
    return [_by_step_index(group, credit, _standardized(std_normalize)) for group in returns]


def reinforce_pp_advantages(
    returns: Nested, credit: Literal["step", "token"] = "step", std_normalize: bool = True
) -> Nested:
    """REINFORCE++: the GRPO normalization over all episodes of the batch."""
    flat = _by_step_index([ep for group in returns for ep in group], credit,
                          _standardized(std_normalize))
    out: Nested = []
    for group in returns:
        out.append(flat[: len(group)])
        flat = flat[len(group):]
    return out


def rloo_advantages(returns: Nested, credit: Literal["step", "token"] = "step") -> Nested:
    """Leave-one-out: baseline = mean return of the *other* episodes of the group (at the same
    step index for step credit)."""
    return [_by_step_index(group, credit, _leave_one_out) for group in returns]


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

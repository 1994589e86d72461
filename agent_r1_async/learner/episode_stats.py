"""Episode-level statistics of a sampled batch, for monitoring (pure functions).

What a user watches in W&B besides the loss: the reward (total, outcome, per env, per step
index), the env's own metrics (success, EM, F1, format_ok, ... averaged over episodes), how
episodes ended and how long they were (steps: mean, p50, p99), the success rate per horizon
bucket of envs that report one, and the token-weighted staleness histogram of the batch
(learner version − version of each action token).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from agent_r1_async.wire.messages import SampleBatch

CANARY_PREFIX = "hacking_"
"""Episode metrics that are reward-hacking canaries (envs/canaries.py, METRIC_PREFIX): logged
as `hacking/<name>` (episodes of the batch that tripped it) and `hacking/<name>_rate`."""
HORIZON_METRIC = "horizon_bucket"
"""An episode metric naming the episode's horizon bucket (the `world` env: the power of two
at or above its optimal plan length); with `success` it gives `env/success_by_horizon/le_<b>`,
the success rate of the batch's episodes in bucket b."""


def percentile(values: list[int], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of `values` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(math.ceil(q / 100 * len(ordered)), 1) - 1])


def staleness_histogram(batch: SampleBatch, learner_version: int) -> dict[int, int]:
    """{staleness: action tokens} over every step of the batch."""
    hist: Counter[int] = Counter()
    for group in batch.groups:
        for ep in group.episodes:
            for step in ep.steps:
                if step.token_versions:
                    hist.update(learner_version - v for v in step.token_versions)
                else:
                    hist[learner_version - step.policy_version] += len(step.action_ids)
    return dict(hist)


def episode_stats(batch: SampleBatch) -> dict[str, float]:
    """Means over the batch's episodes, keyed `reward/...`, `env/...`, `episodes/...`; the
    reward-hacking canaries as counts and rates, `hacking/...`."""
    totals: list[float] = []
    outcomes: list[float] = []
    by_env: dict[str, list[float]] = defaultdict(list)
    by_step: dict[int, list[float]] = defaultdict(list)
    env_metrics: dict[str, list[float]] = defaultdict(list)
    status: Counter[str] = Counter()
    steps: list[int] = []
    by_horizon: dict[int, list[float]] = defaultdict(list)
    for group in batch.groups:
        for ep in group.episodes:
            end = ep.end
            status[end.status] += 1
            process = [s.process_reward for s in ep.steps]
            total = sum(process) + end.outcome_reward
            totals.append(total)
            outcomes.append(end.outcome_reward)
            by_env[end.env_name].append(total)
            steps.append(len(ep.steps))
            for s in ep.steps:
                by_step[s.step_index].append(s.process_reward)
            for k, v in end.metrics.items():
                env_metrics[k].append(v)
            if HORIZON_METRIC in end.metrics and "success" in end.metrics:
                by_horizon[int(end.metrics[HORIZON_METRIC])].append(end.metrics["success"])
    n = max(len(totals), 1)
    out: dict[str, float] = {
        "reward/mean": sum(totals) / n,
        "reward/outcome_mean": sum(outcomes) / n,
        "episodes/steps_mean": sum(steps) / n,
        "episodes/steps_p50": percentile(steps, 50),
        "episodes/steps_p99": percentile(steps, 99),
    }
    for bucket, vals in sorted(by_horizon.items()):
        out[f"env/success_by_horizon/le_{bucket}"] = sum(vals) / len(vals)
    for env, vals in by_env.items():
        out[f"reward/env/{env}"] = sum(vals) / len(vals)
    for i, vals in sorted(by_step.items()):
        out[f"reward/process_step_{i}"] = sum(vals) / len(vals)
    for k, vals in env_metrics.items():
        if k.startswith(CANARY_PREFIX):  # envs/canaries.py: counts, not means, per update
            out[f"hacking/{k[len(CANARY_PREFIX):]}"] = sum(vals)
            out[f"hacking/{k[len(CANARY_PREFIX):]}_rate"] = sum(vals) / len(vals)
        else:
            out[f"env/{k}"] = sum(vals) / len(vals)
    for k, c in status.items():
        out[f"episodes/status/{k}"] = c / n
    return out

"""Range checks at ingest: every numeric field of a record against the run's own bounds.

A frame that decodes is not yet a record the learner can train on: any local process can send
one. Values that decode but crash or poison a later stage are refused here,
each with a reason key the buffer counts (`drops["invalid_record/<reason>"]`):

| reason          | refused                                                              |
|-----------------|----------------------------------------------------------------------|
| `empty_action`  | a step with no action token (the learner's loss needs one)            |
| `shape`         | logprobs / token_versions not one per action token                   |
| `too_long`      | context + action tokens beyond `model.max_model_len` (never trained)  |
| `delta`         | a delta record's fields inconsistent by themselves (wire/delta.py)    |
| `token_id`      | a token id outside [0, vocab_size) (the embedding lookup would crash) |
| `step_index`    | step_index outside [0, env.max_turns)                                |
| `num_steps`     | num_steps outside [0, env.max_turns]                                 |
| `group_size`    | group_size outside [1, algorithm.group_size]                         |
| `version`       | policy_version outside [0, learner version + 1] (2^62 crashed W&B)   |
| `token_versions`| a token version outside that range (2^64-1 crashed the learner)      |
| `reward`        | a reward that is not finite or beyond ±1e6 (±1e200 overflowed)       |
| `logprob`       | a log-prob that is not finite or outside [-1e4, 0] (+1e-6 rounding)   |
| `timing`        | a time, count or metric that is not finite or absurd                 |

The same bounds keep `ActorStats` sane (`invalid_stats/<reason>`).

The run's bounds are a `RecordBounds`, derived once at launch from the run's config and the
policy's vocabulary (`RecordBounds.from_config`) and handed to the buffer; no user key sets
them. The learner's version moves during the run, so its bound (`max_version`) is an argument
of each check instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_r1_async.wire.delta import context_length, form_problem
from agent_r1_async.wire.messages import (
    MAX_ABS_REWARD,
    MAX_COUNT,
    MAX_METRICS,
    ActorStats,
    EpisodeEnd,
    StepRecord,
)

if TYPE_CHECKING:
    from agent_r1_async.config import RunConfig

MIN_LOGPROB = -1e4
"""Smallest log-prob accepted (exp(-1e4) is 0 in float64 already)."""
MAX_LOGPROB = 1e-6
"""Largest log-prob accepted: 0, plus room for an engine's float32 rounding."""
MAX_SECONDS = 1e7
"""Largest duration accepted (about 4 months)."""
MAX_TOKENS_PER_S = 1e7
"""Largest throughput one actor may report (an H100 serves ~1e4-1e5 tok/s)."""


@dataclass(frozen=True)
class RecordBounds:
    """The run's own bounds on a record, derived at launch (`from_config`), never user keys.
    0 = unknown: that check is skipped (tests and benchmarks set only the ones they need)."""

    vocab_size: int = 0
    """Token ids must be in [0, vocab_size): the policy's config.json `vocab_size` (0 when it
    is a hub id not on disk)."""
    max_model_len: int = 0
    """A step's context + action tokens fit in this: `model.max_model_len`."""
    max_steps: int = 0
    """step_index < this, num_steps <= this: `env.max_turns`."""
    max_group_size: int = 0
    """An EpisodeEnd's group_size is in [1, this]: `algorithm.group_size` (the buffer sets it
    from its own `algorithm`, `EpisodeBuffer.group_size`, whatever the bounds it is given say)."""
    max_actors: int = 0
    """ActorStats are kept for at most this many actor ids: `actors.num_actors` (0: the
    buffer's default cap)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_model_len", "max_steps", "max_group_size", "max_actors"):
            if getattr(self, name) < 0:
                raise ValueError(f"RecordBounds.{name} must be >= 0 (0 = unchecked), "
                                 f"got {getattr(self, name)}")

    @classmethod
    def from_config(cls, cfg: RunConfig, vocab_size: int) -> RecordBounds:
        """The bounds of the run `cfg` whose policy has `vocab_size` token ids (0: unknown)."""
        return cls(vocab_size=vocab_size, max_model_len=cfg.model.max_model_len,
                   max_steps=cfg.env.max_turns, max_group_size=cfg.algorithm.group_size,
                   max_actors=cfg.actors.num_actors)


def _ids_outside(ids: Any, vocab_size: int) -> bool:
    """Whether any token id is negative or >= vocab_size (vectorized: ~1 µs for 600 ids)."""
    if not len(ids):
        return False
    v = np.asarray(ids)  # a packed TokenIds is viewed, not copied
    return bool(v.min() < 0 or v.max() >= vocab_size)


def _logprobs_bad(values: Any) -> bool:
    if not len(values):
        return False
    v = np.asarray(values, dtype=np.float64)
    lo, hi = v.min(), v.max()  # NaN propagates: the comparison below is then False
    return not (lo >= MIN_LOGPROB and hi <= MAX_LOGPROB)


def _reward_bad(x: float) -> bool:
    return not (math.isfinite(x) and abs(x) <= MAX_ABS_REWARD)


def _seconds_bad(*xs: float) -> bool:
    return not all(math.isfinite(x) and 0.0 <= x <= MAX_SECONDS for x in xs)


def check_end(msg: EpisodeEnd, b: RecordBounds) -> tuple[str, str]:
    """(reason, detail) of why an EpisodeEnd is refused, or ("", "")."""
    where = f"episode_end {msg.episode_id!r}"
    if msg.group_size < 1 or (b.max_group_size and msg.group_size > b.max_group_size):
        return "group_size", f"{where}: group_size {msg.group_size}"
    if msg.num_steps < 0 or (b.max_steps and msg.num_steps > b.max_steps):
        return "num_steps", f"{where}: num_steps {msg.num_steps} (env.max_turns {b.max_steps})"
    if _reward_bad(msg.outcome_reward):  # a NaN or ±1e200 would poison priorities and losses
        return "reward", f"{where}: outcome_reward {msg.outcome_reward}"
    if len(msg.metrics) > MAX_METRICS or not all(
            math.isfinite(v) and abs(v) <= MAX_COUNT for v in msg.metrics.values()):
        return "timing", f"{where}: {len(msg.metrics)} metrics, or one not finite / absurd"
    if _seconds_bad(msg.wall_time_s) or not math.isfinite(msg.created_at):
        return "timing", f"{where}: wall_time_s {msg.wall_time_s}, created_at {msg.created_at}"
    return "", ""


def check_step(msg: StepRecord, b: RecordBounds, max_version: int) -> tuple[str, str]:
    """(reason, detail) of why a StepRecord is refused, or ("", ""); `max_version`: the
    learner's version + 1."""
    where = f"step {msg.episode_id!r}/{msg.step_index}"
    n = len(msg.action_ids)
    if n == 0:
        return "empty_action", f"{where}: no action tokens"
    if len(msg.behavior_logprobs) != n or (msg.token_versions and len(msg.token_versions) != n):
        return "shape", (f"{where}: {len(msg.behavior_logprobs)} logprobs, "
                         f"{len(msg.token_versions)} token_versions for {n} actions")
    problem = form_problem(msg)
    if problem:
        return "delta", f"{where}: {problem}"
    context = context_length(msg)  # a delta's whole length, as declared (assembly checks it)
    if b.max_model_len and context + n > b.max_model_len:
        return "too_long", (f"{where}: {context} + {n} tokens > model.max_model_len "
                            f"{b.max_model_len}")
    if b.vocab_size and (_ids_outside(msg.context_ids, b.vocab_size)
                         or _ids_outside(msg.action_ids, b.vocab_size)):
        return "token_id", f"{where}: token id outside [0, {b.vocab_size})"
    if msg.step_index < 0 or (b.max_steps and msg.step_index >= b.max_steps):
        return "step_index", f"{where}: step_index outside [0, env.max_turns={b.max_steps})"
    if not 0 <= msg.policy_version <= max_version:
        return "version", f"{where}: policy_version {msg.policy_version} > {max_version}"
    if msg.token_versions and not (min(msg.token_versions) >= 0
                                   and max(msg.token_versions) <= max_version):
        return "token_versions", f"{where}: a token version outside [0, {max_version}]"
    if _reward_bad(msg.process_reward):
        return "reward", f"{where}: process_reward {msg.process_reward}"
    if _logprobs_bad(msg.behavior_logprobs):
        return "logprob", f"{where}: a behavior log-prob outside [{MIN_LOGPROB}, 0]"
    if (_seconds_bad(msg.gen_time_s, msg.env_time_s) or not math.isfinite(msg.created_at)
            or not 0 <= msg.num_tool_calls <= MAX_COUNT):
        return "timing", f"{where}: a time or count not finite or absurd"
    return "", ""


def check_record(msg: StepRecord | EpisodeEnd, b: RecordBounds,
                 max_version: int) -> tuple[str, str]:
    """(reason, detail) of why a record is refused, or ("", ""); `max_version`: the learner's
    version + 1."""
    return check_end(msg, b) if isinstance(msg, EpisodeEnd) else check_step(msg, b, max_version)


def check_stats(msg: ActorStats, max_version: int) -> str:
    """Why an ActorStats report is refused ("" if it is sane); `max_version`: the learner's
    version + 1."""
    if not 0 <= msg.policy_version <= max_version:
        return "version"
    rates_ok = (math.isfinite(msg.tokens_per_s) and 0.0 <= msg.tokens_per_s <= MAX_TOKENS_PER_S
                and math.isfinite(msg.episodes_per_s)
                and 0.0 <= msg.episodes_per_s <= MAX_TOKENS_PER_S)
    if not rates_ok:
        return "rate"
    if _seconds_bad(msg.gen_time_s, msg.env_time_s, msg.weight_sync_latency_s,
                    msg.progress_age_s) or \
            not math.isfinite(msg.time):
        return "timing"
    counts = (msg.episodes_in_flight, msg.episodes_done, msg.episodes_failed, msg.tokens_total)
    if not all(0 <= c <= MAX_COUNT for c in counts):
        return "count"
    return ""


__all__ = ["MAX_ABS_REWARD", "MIN_LOGPROB", "RecordBounds", "check_record", "check_stats"]

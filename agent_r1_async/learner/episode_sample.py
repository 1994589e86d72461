"""Episodes a person can read: a small sample of an update's batch, one row per step.

Every `logging.episodes_every` updates the learner takes a sample right after the update
(`EpisodeSampler.sample`): it alone has the batch's whole contexts, the tokenizer's inverse,
each token's policy version and the importance weights it just computed. What it takes:

- `logging.episodes_groups` of the batch's trainable groups, drawn by a generator seeded
  with `learner.seed` and the update, and from each its best and its worst episode by
  return (process rewards + outcome; of equal returns the first and the last);
- every episode of the batch that tripped a reward-hacking canary (an end metric
  `hacking_*` above 0; envs/canaries.py), bounded by the batch;
- the failed episodes the buffer sent along (`SampleBatch.failed`: env or engine error,
  timeout; at most `logging.episodes_failed`, asked for in the `SampleRequest` only at a
  sampled update). They were never trained: no advantage and no importance weight.

A row is JSON-ready (str, numbers, lists, dicts) and carries: the update, the episode's and
group's ids, task, env and actor, why it was picked (`pick`: best, worst, canary, failed),
the step index and the episode's length, the decoded tail of the step's context
(`logging.episodes_context_tokens` tokens), the decoded action, what came back before the
next step (`observation`: the tokens the next context adds after this action; "" at the
last step), the process reward, the advantage, the step's distinct token versions and its
staleness (the update's learner version − its oldest token's), the mean, max and min
importance weight over its tokens (learner/is_weights.py), the engine's finish reason and
tool-call count, and the episode's outcome, return, status, error line, env metrics and
tripped canaries. Texts are decoded with special tokens kept (what the model saw) and cut
to `MAX_TEXT_TOKENS` tokens and `MAX_TEXT_CHARS` characters, head and tail kept.

Cost: nothing at other updates. At a sampled one, a few dictionary passes over the batch,
one pass over the micro-batches for the chosen steps' weights (a collective when the
learner is sharded: every rank takes part, rank 0 alone decodes) and a few hundred short
decodes; `learner/episodes_sample_s` reports it. The tokenizer is loaded when the learner
is built, not in an update.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

from agent_r1_async import config
from agent_r1_async.learner import batching
from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner.episode_stats import CANARY_PREFIX
from agent_r1_async.learner.is_weights import step_weights
from agent_r1_async.wire import messages
from agent_r1_async.wire.delta import resolve_contexts

log = logging.getLogger(__name__)

MAX_TEXT_TOKENS = 512
"""Most tokens of one text field decoded (head and tail halves when longer)."""
MAX_TEXT_CHARS = 2000
"""Most characters of one text field kept (head and tail halves when longer)."""
ELLIPSIS = " … "
"""Where a text was cut."""

Row = dict[str, Any]


def clip_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` within `limit` characters: its head and tail around `ELLIPSIS`."""
    if len(text) <= limit:
        return text
    half = (limit - len(ELLIPSIS)) // 2
    return text[:half] + ELLIPSIS + text[len(text) - half:]


def episode_return(ep: messages.Episode) -> float:
    return sum(s.process_reward for s in ep.steps) + ep.end.outcome_reward


def canaries(end: messages.EpisodeEnd) -> list[str]:
    """The reward-hacking canaries the episode tripped (names without the prefix)."""
    return sorted(k[len(CANARY_PREFIX):] for k, v in end.metrics.items()
                  if k.startswith(CANARY_PREFIX) and v > 0)


def pick_episodes(groups: Sequence[messages.Group], n_groups: int,
                  rng: random.Random) -> list[tuple[int, int, str]]:
    """(group index, episode index, why) of the trained episodes to show (module docstring)."""
    picked: dict[tuple[int, int], str] = {}
    chosen = sorted(rng.sample(range(len(groups)), min(n_groups, len(groups))))
    for gi in chosen:
        returns = [episode_return(ep) for ep in groups[gi].episodes]
        best = max(range(len(returns)), key=lambda i: (returns[i], -i))
        worst = min(range(len(returns)), key=lambda i: (returns[i], -i))
        picked[(gi, best)] = "best"
        picked.setdefault((gi, worst), "worst")
    for gi, group in enumerate(groups):
        for ei, ep in enumerate(group.episodes):
            if canaries(ep.end):
                picked.setdefault((gi, ei), "canary")
    return [(gi, ei, why) for (gi, ei), why in picked.items()]


class EpisodeSampler:
    """Decides which updates are sampled and turns a sampled update into rows."""

    def __init__(self, cfg: config.RunConfig, load_tokenizer: bool = True) -> None:
        lg = cfg.logging
        self.every = lg.episodes_every
        self.groups = lg.episodes_groups
        self.failed = lg.episodes_failed
        self.context_tokens = lg.episodes_context_tokens
        self.seed = cfg.learner.seed
        self.tokenizer: Any = None
        if self.every and load_tokenizer and dist_util.rank() == 0:
            self.tokenizer = _tokenizer(cfg.model.name_or_path)

    def due(self, update: int) -> bool:
        """Is update number `update` (1 = the first) sampled?"""
        return self.every > 0 and update % self.every == 0

    def sample(self, batch: messages.SampleBatch, rows: Sequence[batching.Row],
               mbs: Sequence[batching.MicroBatch], learner_version: int,
               update: int) -> list[Row]:
        """The rows of the update's sample (rank 0; [] elsewhere). Every rank calls it: the
        chosen steps' importance weights are a collective."""
        groups = [g for g, _ in batching.trainable_groups(batch)]
        picks = pick_episodes(groups, self.groups, random.Random(f"{self.seed}/{update}"))
        by_episode: dict[tuple[int, int], list[int]] = {}
        for i, r in enumerate(rows):
            by_episode.setdefault((r.group_index, r.episode_index), []).append(i)
        wanted = [i for gi, ei, _ in picks for i in by_episode.get((gi, ei), [])]
        weights = step_weights(rows, mbs, wanted)
        if dist_util.rank() != 0:
            return []
        out: list[Row] = []
        for gi, ei, why in picks:
            idx = by_episode.get((gi, ei), [])
            ep = groups[gi].episodes[ei]
            contexts = [rows[i].context_ids for i in idx]
            out += self._rows(ep, why, contexts, [rows[i].advantage for i in idx],
                              [weights.get(i) for i in idx], learner_version, update)
        for ep in batch.failed[:self.failed]:
            steps = batching.sorted_steps(ep)
            try:
                contexts = list(resolve_contexts(steps))
            except ValueError:  # a broken reference: each record's own tokens
                contexts = [s.context_ids for s in steps]
            out += self._rows(ep, "failed", contexts, [None] * len(steps),
                              [None] * len(steps), learner_version, update)
        return out

    def _rows(self, ep: messages.Episode, why: str, contexts: Sequence[Sequence[int]],
              advantages: Sequence[float | None],
              weights: Sequence[tuple[float, float, float] | None],
              learner_version: int, update: int) -> list[Row]:
        end = ep.end
        steps = batching.sorted_steps(ep)
        shared = {
            "update": update, "episode_id": end.episode_id, "group_id": end.group_id,
            "task_id": end.task_id, "env_name": end.env_name, "actor_id": end.actor_id,
            "pick": why, "num_steps": len(steps), "outcome_reward": end.outcome_reward,
            "return": episode_return(ep), "status": end.status, "error": end.error,
            "metrics": dict(end.metrics), "canaries": canaries(end),
        }
        out: list[Row] = []
        for t, step in enumerate(steps):
            context = contexts[t] if t < len(contexts) else step.context_ids
            versions = sorted(set(step.token_versions)) or [step.policy_version]
            w = weights[t] if t < len(weights) else None
            out.append({
                **shared,
                "step": step.step_index,
                "context_tokens": len(context),
                "context_tail": self._decode(list(context[len(context) - self.context_tokens:])
                                             if self.context_tokens else []),
                "action": self._decode(list(step.action_ids)),
                "action_tokens": len(step.action_ids),
                "observation": self._decode(_observation(context, step, contexts, t)),
                "process_reward": step.process_reward,
                "advantage": advantages[t] if t < len(advantages) else None,
                "versions": versions,
                "staleness": learner_version - versions[0],
                "is_weight_mean": None if w is None else w[0],
                "is_weight_max": None if w is None else w[1],
                "is_weight_min": None if w is None else w[2],
                "finish_reason": step.finish_reason,
                "num_tool_calls": step.num_tool_calls,
            })
        return out

    def _decode(self, ids: list[int]) -> str:
        if len(ids) > MAX_TEXT_TOKENS:
            half = MAX_TEXT_TOKENS // 2
            return clip_text(self._decode(ids[:half]) + ELLIPSIS + self._decode(ids[-half:]))
        if self.tokenizer is None:
            return clip_text(" ".join(map(str, ids)))
        return clip_text(self.tokenizer.decode(ids, skip_special_tokens=False,
                                               clean_up_tokenization_spaces=False))


def _observation(context: Sequence[int], step: messages.StepRecord,
                 contexts: Sequence[Sequence[int]], t: int) -> list[int]:
    """The tokens the next step's context adds after this step's context + action (the
    env's answer and the turn's closing tokens); when the next context does not extend this
    one (a window that slid, a summary), its last `MAX_TEXT_TOKENS` tokens; [] at the end."""
    if t + 1 >= len(contexts):
        return []
    nxt, head = contexts[t + 1], len(context) + len(step.action_ids)
    if (len(nxt) >= head and list(nxt[:len(context)]) == list(context)
            and list(nxt[len(context):head]) == list(step.action_ids)):
        return list(nxt[head:])
    return list(nxt[-MAX_TEXT_TOKENS:])


def _tokenizer(name_or_path: str) -> Any:
    """The policy's tokenizer, or None (then texts are token ids) when it does not load."""
    from agent_r1_async import models

    try:
        return models.load_tokenizer(name_or_path)
    except Exception as e:  # a sample without text is still a sample
        log.warning("episode samples show token ids: the tokenizer of %s did not load (%s)",
                    name_or_path, " ".join(str(e).split())[:200])
        return None

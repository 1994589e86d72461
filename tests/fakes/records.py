"""Wire records built by hand: steps, episode ends, episodes, groups, sample batches.

One factory for every test (buffer and learner alike). Defaults: task id `task-<group>`, env
"fake", actor "a0", context [1, 2, 3, 4], three action tokens 5 with behavior log-prob -0.5.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agent_r1_async.wire.messages import (
    Episode,
    EpisodeEnd,
    Group,
    SampleBatch,
    StepRecord,
)


def step(
    episode_id: str,
    group_id: str,
    index: int,
    *,
    context_ids: Sequence[int] = (1, 2, 3, 4),
    action_ids: Sequence[int] | None = None,
    n_actions: int = 3,
    behavior_logprobs: Sequence[float] | None = None,
    version: int = 0,
    token_versions: Sequence[int] = (),
    process_reward: float = 0.0,
    done: bool = False,
    actor_id: str = "a0",
) -> StepRecord:
    """Step `index` of an episode; `action_ids` defaults to `n_actions` tokens 5, each
    behavior log-prob to -0.5."""
    actions = list(action_ids) if action_ids is not None else [5] * n_actions
    return StepRecord(
        episode_id=episode_id,
        group_id=group_id,
        task_id=f"task-{group_id}",
        actor_id=actor_id,
        env_name="fake",
        step_index=index,
        context_ids=list(context_ids),
        action_ids=actions,
        behavior_logprobs=(
            list(behavior_logprobs) if behavior_logprobs is not None else [-0.5] * len(actions)
        ),
        policy_version=version,
        process_reward=process_reward,
        done=done,
        token_versions=list(token_versions),
    )


def end(
    episode_id: str,
    group_id: str,
    num_steps: int,
    *,
    reward: float = 1.0,
    status: str = "ok",
    group_size: int = 2,
    actor_id: str = "a0",
) -> EpisodeEnd:
    return EpisodeEnd(
        episode_id=episode_id,
        group_id=group_id,
        task_id=f"task-{group_id}",
        actor_id=actor_id,
        env_name="fake",
        num_steps=num_steps,
        outcome_reward=reward,
        status=status,  # type: ignore[arg-type]
        group_size=group_size,
    )


def episode_records(
    episode_id: str,
    group_id: str,
    *,
    num_steps: int = 2,
    reward: float = 1.0,
    version: int = 0,
    group_size: int = 2,
    status: str = "ok",
    actor_id: str = "a0",
) -> list[StepRecord | EpisodeEnd]:
    """What an actor sends for one episode: its steps, then its end."""
    recs: list[StepRecord | EpisodeEnd] = [
        step(episode_id, group_id, i, version=version, actor_id=actor_id)
        for i in range(num_steps)
    ]
    recs.append(end(episode_id, group_id, num_steps, reward=reward, status=status,
                    group_size=group_size, actor_id=actor_id))
    return recs


def group_records(
    group_id: str, rewards: list[float], *, version: int = 0, num_steps: int = 2,
    actor_id: str = "a0",
) -> list[StepRecord | EpisodeEnd]:
    """Records of a whole group: episode `<group>-e<j>` ends with `rewards[j]`, all ok."""
    out: list[StepRecord | EpisodeEnd] = []
    for j, r in enumerate(rewards):
        out += episode_records(f"{group_id}-e{j}", group_id, num_steps=num_steps, reward=r,
                               version=version, group_size=len(rewards), actor_id=actor_id)
    return out


def episode(
    episode_id: str,
    group_id: str,
    steps: list[StepRecord],
    reward: float,
    *,
    status: str = "ok",
    group_size: int = 2,
) -> Episode:
    """An assembled episode: `steps` (in any order) and its end record."""
    return Episode(steps=steps, end=end(episode_id, group_id, len(steps), reward=reward,
                                        status=status, group_size=group_size))


def make_group(group_id: str, rewards: list[float], *, version: int = 0) -> Group:
    """The group `group_records(group_id, rewards)` assembles into."""
    episodes = [
        episode(f"{group_id}-e{j}", group_id,
                [step(f"{group_id}-e{j}", group_id, i, version=version) for i in range(2)],
                r, group_size=len(rewards))
        for j, r in enumerate(rewards)
    ]
    return Group(group_id, f"task-{group_id}", "fake", episodes)


def sample_batch(groups: list[list[Episode]], version: int = 0) -> SampleBatch:
    """A ready batch of the given groups (each a list of episodes), importance weights 1."""
    return SampleBatch(
        groups=[Group(eps[0].end.group_id, eps[0].end.task_id, "fake", eps) for eps in groups],
        is_weights=[1.0] * len(groups),
        learner_version=version,
    )


def synthetic_batch(
    rng: random.Random, num_groups: int, group_size: int, vocab: int, version: int,
    behavior_logprobs: float = -3.0, max_steps: int = 2,
) -> SampleBatch:
    """Groups of multi-step episodes of random token ids; episode e of a group wins iff e = 0.

    Step t's context = the previous step's context + action + a fake tool reply (so later
    contexts hold tool output that must be masked).
    """
    groups = []
    for g in range(num_groups):
        eps = []
        for e in range(group_size):
            ctx = [rng.randrange(vocab) for _ in range(rng.randint(4, 10))]
            steps = []
            n = rng.randint(1, max_steps)
            for t in range(n):
                act = [rng.randrange(vocab) for _ in range(rng.randint(2, 6))]
                steps.append(step(
                    f"e{g}-{e}", f"g{g}", t, context_ids=ctx, action_ids=act, version=version,
                    behavior_logprobs=[behavior_logprobs] * len(act), done=t == n - 1,
                    process_reward=0.1 if t == 0 else 0.0,
                ))
                ctx = ctx + act + [rng.randrange(vocab) for _ in range(3)]
            eps.append(episode(f"e{g}-{e}", f"g{g}", steps, 1.0 if e == 0 else 0.0,
                               group_size=group_size))
        groups.append(eps)
    return sample_batch(groups, version)

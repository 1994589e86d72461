"""Fakes and record builders for buffer tests: a settable clock and version, tiny records."""

from __future__ import annotations

from agent_r1_async.wire.messages import Episode, EpisodeEnd, Group, StepRecord


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeVersion:
    def __init__(self, v: int = 0) -> None:
        self.v = v

    def __call__(self) -> int:
        return self.v


def step(
    episode_id: str,
    group_id: str,
    index: int,
    version: int = 0,
    n_actions: int = 3,
    token_versions: list[int] | None = None,
    actor_id: str = "a0",
    process_reward: float = 0.0,
) -> StepRecord:
    return StepRecord(
        episode_id=episode_id,
        group_id=group_id,
        task_id=f"task-{group_id}",
        actor_id=actor_id,
        env_name="fake",
        step_index=index,
        context_ids=[1, 2, 3, 4],
        action_ids=[5] * n_actions,
        behavior_logprobs=[-0.5] * n_actions,
        policy_version=version,
        process_reward=process_reward,
        token_versions=token_versions or [],
    )


def end(
    episode_id: str,
    group_id: str,
    num_steps: int,
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
    num_steps: int = 2,
    reward: float = 1.0,
    version: int = 0,
    group_size: int = 2,
    status: str = "ok",
    actor_id: str = "a0",
) -> list[StepRecord | EpisodeEnd]:
    recs: list[StepRecord | EpisodeEnd] = [
        step(episode_id, group_id, i, version, actor_id=actor_id) for i in range(num_steps)
    ]
    recs.append(end(episode_id, group_id, num_steps, reward, status, group_size, actor_id))
    return recs


def group_records(
    group_id: str, rewards: list[float], version: int = 0, num_steps: int = 2
) -> list[StepRecord | EpisodeEnd]:
    """Records of a whole group: one episode per reward, all ok."""
    out: list[StepRecord | EpisodeEnd] = []
    for j, r in enumerate(rewards):
        out += episode_records(f"{group_id}-e{j}", group_id, num_steps, r, version, len(rewards))
    return out


def make_group(group_id: str, rewards: list[float], version: int = 0) -> Group:
    recs = group_records(group_id, rewards, version)
    episodes = []
    steps: list[StepRecord] = []
    for r in recs:
        if isinstance(r, StepRecord):
            steps.append(r)
        else:
            episodes.append(Episode(steps=steps, end=r))
            steps = []
    return Group(group_id, f"task-{group_id}", "fake", episodes)

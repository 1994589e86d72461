"""What huge OpenEnv observations cost the process that plays the episodes: RSS with an
openenv-core server answering every reset and step with `--mb` MB of text.

    .venv/bin/python -m bench.bench_openenv_observation_memory --mb 12
    .venv/bin/python -m bench.bench_openenv_observation_memory --mb 20 --max-message-mb 32

Rounds of `--group` concurrent episodes (reset + one step) through the `openenv` env; printed
per round: the process's RSS after it and the peak so far (sampled every 20 ms), and the
longest observation text the agent reads (`env.args.max_observation_chars` cuts it). Memory
that grows round after round would be a leak; a flat line is the bound.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any


def build_app(mb: float) -> Any:
    from openenv.core.env_server import Action, Environment, Observation, State, create_app
    from pydantic import Field

    class Say(Action):
        message: str = Field(...)

    class Big(Observation):
        message: str = Field("")

    text = "room " * int(mb * 2**20 / 5)

    class BigEnvironment(Environment[Say, Big, State]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  **kwargs: Any) -> Big:
            return Big(message=text, reward=None, done=False)

        def step(self, action: Say, timeout_s: float | None = None, **kwargs: Any) -> Big:
            return Big(message=text, reward=1.0, done=True)

        @property
        def state(self) -> State:
            return self._state

    return create_app(BigEnvironment, Say, Big, env_name="big", max_concurrent_envs=64)


async def _measure(spec: Any, rounds: int, group: int) -> None:
    import psutil

    me, peak = psutil.Process(), [0]

    async def watch() -> None:
        while True:
            peak[0] = max(peak[0], me.memory_info().rss)
            await asyncio.sleep(0.02)

    async def episode(task: Any) -> int:
        env = spec.make()
        obs = await env.reset(task)
        await env.step("go")
        return len(obs.messages[-1]["content"])

    watcher = asyncio.create_task(watch())
    tasks, longest = spec.tasks("train"), 0
    print(f"RSS at start {me.memory_info().rss / 2**20:.0f} MB")
    for r in range(rounds):
        lens = await asyncio.gather(*(episode(t) for t in tasks[r * group:(r + 1) * group]))
        longest = max(longest, *lens)
        print(f"round {r + 1}: RSS {me.memory_info().rss / 2**20:.0f} MB, peak "
              f"{peak[0] / 2**20:.0f} MB", flush=True)
    watcher.cancel()
    print(f"the agent reads at most {longest} characters of an observation")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=float, default=12.0, help="observation size")
    ap.add_argument("--max-message-mb", type=float, default=32.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--group", type=int, default=8, help="episodes at once")
    ap.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)  # the server's port
    args = ap.parse_args()
    if args.serve:
        import uvicorn

        uvicorn.run(build_app(args.mb), host="127.0.0.1", port=args.serve, log_level="warning")
        return
    from agent_r1_async.config import EnvConfig
    from agent_r1_async.envs.registry import get_env_spec

    server = [sys.executable, "-m", "bench.bench_openenv_observation_memory", "--mb",
              str(args.mb), "--serve", "{port}"]
    cfg = EnvConfig(name="openenv", max_turns=2, step_timeout_s=120.0, args={
        "name": "big", "command": server, "timeout_s": 60.0, "connect_timeout_s": 30.0,
        "max_message_mb": args.max_message_mb,
        "tasks": {"train": {"seed_range": [0, args.rounds * args.group]}}})
    spec = get_env_spec(cfg)
    print(f"{args.mb:g} MB observations, max_message_mb {args.max_message_mb:g}, "
          f"{args.rounds} rounds of {args.group} episodes at once")
    try:
        asyncio.run(_measure(spec, args.rounds, args.group))
    finally:
        spec.definition.close()


if __name__ == "__main__":
    main()

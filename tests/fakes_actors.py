"""Fakes for actor-side tests: a scripted engine and env, a credit server, a stream checker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from agent_r1_async.actors.engines.base import EngineError, GenResult
from agent_r1_async.config import RunConfig, config_from_dict
from agent_r1_async.envs.base import Observation, StepResult, Task
from agent_r1_async.wire import messages as m


class FakeEngine:
    """Answers every request with `action_ids` (log-prob -0.5 each) at `self.version`.

    `fail_on_call` makes the n-th call (0-based) raise `EngineError`; `delay_s` sleeps first;
    calls from `hang_from` on never answer (until cancelled).
    """

    def __init__(
        self, action_ids: list[int], fail_on_call: int | None = None, delay_s: float = 0.0,
        hang_from: int | None = None,
    ) -> None:
        self.action_ids = action_ids
        self.fail_on_call = fail_on_call
        self.delay_s = delay_s
        self.hang_from = hang_from
        self.version = 0
        self.calls: list[tuple[list[int], int | None]] = []
        self.loaded: list[int] = []

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        n = len(self.calls)
        self.calls.append((list(context_ids), max_new_tokens))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.hang_from is not None and n >= self.hang_from:
            await asyncio.sleep(3600)
        if n == self.fail_on_call:
            raise EngineError("scripted engine failure")
        ids = self.action_ids[: max_new_tokens or len(self.action_ids)]
        return GenResult(ids, [-0.5] * len(ids), "stop", self.version)

    async def load_weights(self, version: int, state_dict: dict) -> None:
        self.version = version
        self.loaded.append(version)

    async def close(self) -> None:
        pass


@dataclass
class ScriptedEnv:
    """Ends after `turns` steps with outcome 1.0; `raise_on` / `hang_on` step index misbehaves.

    Step index -1 means reset. Records the action texts it saw.
    """

    turns: int = 2
    raise_on: int | None = None
    hang_on: int | None = None
    never_done: bool = False
    actions: list[str] = field(default_factory=list)

    async def _misbehave(self, index: int) -> None:
        if index == self.raise_on:
            raise RuntimeError(f"scripted env failure at {index}")
        if index == self.hang_on:
            await asyncio.sleep(3600)

    async def reset(self, task: Task) -> Observation:
        await self._misbehave(-1)
        return Observation([{"role": "user", "content": task.prompt}])

    async def step(self, action: str) -> StepResult:
        index = len(self.actions)
        self.actions.append(action)
        await self._misbehave(index)
        done = not self.never_done and index + 1 >= self.turns
        return StepResult(
            observation=Observation([] if done else [{"role": "tool", "content": f"obs {index}"}]),
            reward=0.1 * (index + 1),
            done=done,
            outcome_reward=1.0 if done else 0.0,
            num_tool_calls=1,
            metrics={"em": 1.0} if done else {},
        )



def actor_config(backend: str, **engine: object) -> RunConfig:
    return config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": backend, "dtype": "float32", "max_new_tokens": 8,
                   "max_concurrent_requests": 16, "kv_cache_gb": 1, **engine},
        "env": {"name": "arithmetic", "max_turns": 2, "step_timeout_s": 30},
        "actors": {"groups_in_flight": 2, "stats_interval_s": 0.5},
        "algorithm": {"group_size": 2},
    })


class CreditServer:
    """A tiny ROUTER that acks Hello and grants every credit asked for (counts the grants)."""

    def __init__(self, transport) -> None:
        self._server = transport.server("tcp://127.0.0.1:0")
        self.endpoint = self._server.endpoint
        self.granted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                got = self._server.recv(50)
                if got is None:
                    continue
                peer, frames = got
                msg = m.decode_control(frames[0])
                if isinstance(msg, m.Hello):
                    reply: m.ControlMessage = m.check_hello(msg)
                elif isinstance(msg, m.CreditRequest):
                    ids = [f"fake-{self.granted + i}" for i in range(msg.max_groups)]
                    self.granted += msg.max_groups
                    reply = m.CreditGrant(msg.actor_id, msg.max_groups, 0, group_ids=ids)
                else:
                    reply = m.ErrorReply(f"unexpected {type(msg).__name__}")
                self._server.reply(peer, [m.encode(reply)])
        finally:
            self._server.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class Stream:
    steps: dict[str, list[m.StepRecord]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[str, list[m.EpisodeEnd]] = field(default_factory=lambda: defaultdict(list))
    stats: list[m.ActorStats] = field(default_factory=list)
    arrival: list[tuple[float, m.StepRecord]] = field(default_factory=list)

    def add(self, frames: list) -> list[m.StepRecord | m.EpisodeEnd | m.ActorStats]:
        """Record the messages of one received message (a plain one or a Batch's items)."""
        msgs = list(m.unpack_data(frames))
        for msg in msgs:
            if isinstance(msg, m.StepRecord):
                self.steps[msg.episode_id].append(msg)
                self.arrival.append((time.time(), msg))
            elif isinstance(msg, m.EpisodeEnd):
                self.ends[msg.episode_id].append(msg)
            else:
                self.stats.append(msg)
        return msgs

    def check(self, group_size: int) -> None:
        """Contiguous steps, exactly one end per episode (after its steps), full groups."""
        assert set(self.steps) <= set(self.ends), "steps of an episode that never ended"
        groups: dict[str, int] = defaultdict(int)
        for eid, ends in self.ends.items():
            assert len(ends) == 1, f"episode {eid} has {len(ends)} end records"
            steps = self.steps.get(eid, [])
            assert [s.step_index for s in steps] == list(range(len(steps)))
            assert ends[0].num_steps == len(steps)
            groups[ends[0].group_id] += 1
            for s in steps:
                assert len(s.behavior_logprobs) == len(s.action_ids) > 0
                assert all(lp <= 0.0 for lp in s.behavior_logprobs)
                assert s.group_id == ends[0].group_id
        assert all(n == group_size for n in groups.values()), dict(groups)


class OracleEngine:
    """Plays an env's oracle: finds the task whose prompt is in the context (longest match)
    and answers the oracle action of the current turn, closed with eos."""

    def __init__(self, tokenizer, oracles: dict[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.oracles = oracles
        self.version = 0

    async def generate(self, context_ids: list[int], max_new_tokens: int | None = None) -> GenResult:
        text = self.tokenizer.decode(context_ids)
        prompt = max((p for p in self.oracles if p in text), key=len)
        turn = text.count("<|im_start|>assistant") - 1  # the generation prompt is the last one
        ids = self.tokenizer.encode(self.oracles[prompt][turn], add_special_tokens=False)
        ids.append(self.tokenizer.eos_token_id)
        return GenResult(ids, [-0.1] * len(ids), "stop", self.version)

    async def load_weights(self, version: int, state_dict: dict) -> None:
        self.version = version

    async def close(self) -> None:
        pass

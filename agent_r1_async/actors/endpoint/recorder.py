"""A recorded session's calls as the episode's `StepRecord`s, credited as a rollout's steps.

Each completed call is one step: `context_ids` the context the engine saw, `action_ids` the
exact sampled ids, `behavior_logprobs` and `policy_version` / `token_versions` as the engine
reported them, `process_reward` 0 (the agent's returned reward is the episode's outcome, on
its `EpisodeEnd`), `env_time_s` the agent's own time before the call, `num_tool_calls` the
tool calls parsed from a chat answer. Steps are indexed in the order their calls complete.

With `delta_records`, a call whose context extends the previous call's context + action is
sent as a delta (wire/delta.py), as a rollout's steps are.

A step is sent when the next one completes (so the last one can say `done`), and the last
one when the episode ends: `done` when it ended trainably. After `finish` nothing more is
recorded: a call still generating when its episode ended gets an error, not a step.
"""

from __future__ import annotations

import asyncio
import time

from agent_r1_async.actors.endpoint.calls import Call
from agent_r1_async.actors.endpoint.params import RequestError
from agent_r1_async.actors.rollout import Emit, EpisodeIds
from agent_r1_async.wire.delta import DeltaEncoder
from agent_r1_async.wire.messages import LogProbs, StepRecord, TokenIds


class StepRecorder:
    def __init__(self, ids: EpisodeIds, task_id: str, actor_id: str, env_name: str,
                 emit: Emit, delta_records: bool = False) -> None:
        self.ids, self.task_id = ids, task_id
        self._encoder = DeltaEncoder(delta_records)
        self.actor_id, self.env_name = actor_id, env_name
        self.emit = emit
        self.recorded = 0
        self.finished = False
        self._held: Call | None = None
        self._lock = asyncio.Lock()

    async def add(self, call: Call) -> None:
        """Record a completed call (sets its `step_index`); sends the previous step."""
        async with self._lock:
            if self.finished:
                raise RequestError("this session's episode has ended; the call is not recorded",
                                   410, "invalid_request_error", "session_ended")
            call.step_index = self.recorded
            call.episode_id = self.ids.episode_id
            self.recorded += 1
            held, self._held = self._held, call
            if held is not None:
                await self.emit(self.record(held, done=False))

    async def finish(self, done: bool) -> int:
        """Send the last step (`done` when the episode ended trainably); the steps recorded."""
        async with self._lock:
            self.finished = True
            held, self._held = self._held, None
            if held is not None:
                await self.emit(self.record(held, done=done))
            return self.recorded

    def record(self, call: Call, done: bool) -> StepRecord:
        """The call's record; calls are recorded in step order (the encoder relies on it)."""
        gen = call.gen
        assert call.step_index is not None
        ctx = self._encoder.encode(call.step_index, call.context_ids, gen.action_ids)
        return StepRecord(
            episode_id=self.ids.episode_id, group_id=self.ids.group_id, task_id=self.task_id,
            actor_id=self.actor_id, env_name=self.env_name, step_index=call.step_index,
            context_ids=ctx.context_ids, context_from=ctx.context_from,
            context_len=ctx.context_len, context_crc=ctx.context_crc,
            action_ids=TokenIds(gen.action_ids),
            behavior_logprobs=LogProbs(gen.logprobs), policy_version=gen.policy_version,
            process_reward=0.0, done=done, finish_reason=gen.finish_reason,
            token_versions=list(gen.token_versions), gen_time_s=gen.gen_time_s,
            env_time_s=call.agent_s, num_tool_calls=call.num_tool_calls,
            created_at=time.time(),
        )

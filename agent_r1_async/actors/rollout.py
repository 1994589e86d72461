"""One episode: env.reset -> (context -> engine.generate -> env.step)* -> end record.

Design choices
- A rollout emits a `StepRecord` the moment a step exists (the env has answered) and exactly
  one `EpisodeEnd` when the episode ends, whatever the reason. `emit` is awaited, so a slow
  consumer applies backpressure to the episode instead of buffering without bound.
- Failure isolation: an env exception (`env_error`), an env call past `env.step_timeout_s`
  (`timeout`), a failed engine request (`engine_error`) end *this* episode with a status and a
  one-line reason; the caller (actor, evaluation) goes on. Env failures are logged once per
  distinct error and counted per kind (env_errors.py). Env calls run on worker threads
  (envs/offload.py), so an env that blocks in synchronous code still times out. A cancelled
  episode (actor stop) still sends its end record ("aborted") before the cancellation
  propagates.
- One boundary checks every value an env returns (envs/contract.py) before it is used or
  sent: a NaN or string reward, a `done` that is not a bool, malformed messages or tool
  schemas, a prompt that leaves no room for an action in `model.max_model_len`. A violation
  is an `env_error` like an exception, its reason naming the method, the field and the
  value; no record of that step is emitted.
- Length: the engine's budget is capped to `model.max_model_len - len(context)`; a context
  with no room left ends the episode as `truncated` (its earlier steps stay trainable), except
  the first one: a prompt that alone fills `model.max_model_len` is the env's `env_error`. An
  env that never says done is cut at `env.max_turns` (also `truncated`).
- The env sees the decoded action text; the history keeps the exact sampled ids.
- Records: with `delta_records` (the actors', `actors.delta_records`), a step whose context
  extends the previous step's context + action carries only the appended tokens
  (wire/delta.py); otherwise every record carries its whole context.
- Compaction (`context.builder: compact`, actors/context.py `CompactContext`): when the next
  context would exceed `context.max_tokens`, the step before the next action is a summary
  step: its context is that context with the compaction request, its action the summary the
  engine samples (at most `context.summary_max_tokens`), recorded like any step (log-probs,
  versions, the next step index) with process reward 0 and never sent to the env, so the
  learner trains it with the episode's credit. It counts toward `env.max_turns` (which
  bounds an episode's steps, the buffer's records), so no summary is asked for when only one
  step is left. The step after it sees [instruction, summary, the env's last answer, ...]:
  it does not extend the summary step's context, so it is sent whole and starts a new
  training sequence. Per episode: `context/compactions`, and with at least one,
  `context/summary_tokens` (mean) and `context/success_after_compaction`.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent_r1_async.actors.context import (
    CompactContext,
    ContextBuilder,
    History,
    make_context_builder,
)
from agent_r1_async.actors.engines.base import Engine, GenResult
from agent_r1_async.actors.env_errors import EnvErrorLog
from agent_r1_async.actors.stats import ActorCounters
from agent_r1_async.config import RunConfig
from agent_r1_async.envs.base import Env, Observation, StepResult, Task
from agent_r1_async.envs.contract import (
    EnvContractError,
    check_observation,
    check_step_result,
    prompt_too_long,
)
from agent_r1_async.envs.offload import run_offloaded
from agent_r1_async.wire.delta import DeltaEncoder, Encoded
from agent_r1_async.wire.messages import (
    MAX_METRICS,
    TRAINABLE_STATUSES,
    EpisodeEnd,
    EpisodeStatus,
    LogProbs,
    StepRecord,
    TokenIds,
)

Emit = Callable[[StepRecord | EpisodeEnd], Awaitable[None]]

CONTEXT_METRICS = ("context/compactions", "context/summary_tokens",
                   "context/success_after_compaction")
"""The episode metrics of `context.builder: compact` (EpisodeEnd.metrics, next to the env's)."""
_SUMMARY_STEP = StepResult(Observation([]), reward=0.0, done=False)
"""What a summary step's record says in the env's place: no reward, not the end."""


class _EpisodeOver(Exception):
    """Internal: ends an episode with a status and reason; `method` marks an env failure
    (logged once and counted by kind: env_errors.py)."""

    def __init__(
        self, status: EpisodeStatus, reason: str, method: str = "", kind: str = "",
        exc: BaseException | None = None,
    ) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason
        self.method, self.kind, self.exc = method, kind, exc


def _env_failed(method: str, e: BaseException, what: str = "") -> _EpisodeOver:
    """An env exception in `method` as the episode's end (status env_error)."""
    where = what or f"env.{method}"
    if isinstance(e, EnvContractError):  # a bad value inside the env (a ToolEnv hook's)
        return _EpisodeOver("env_error", f"{where}: {e}", method, e.kind, e)
    kind = type(e).__name__
    return _EpisodeOver("env_error", f"{where}: {kind}: {e}", method, kind, e)


def _violation(method: str, e: EnvContractError) -> _EpisodeOver:
    """A value the env returned that breaks the contract, as the episode's end (env_error)."""
    return _EpisodeOver("env_error", str(e), method, e.kind)


def _detail(e: TimeoutError) -> str:
    """The offloader's note on a call stuck in synchronous code, e.g. " (blocked ... 9.8 s)"."""
    msg = str(e)
    return msg[msg.index(" (blocked"):] if " (blocked" in msg else ""


@dataclass
class EpisodeIds:
    episode_id: str
    group_id: str
    group_size: int

    @classmethod
    def fresh(cls, group_id: str, group_size: int) -> EpisodeIds:
        return cls(uuid.uuid4().hex, group_id, group_size)


@dataclass
class _State:
    steps: int = 0
    outcome: float = 0.0
    status: EpisodeStatus = "ok"
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    summary_tokens: list[int] = field(default_factory=list)
    """The length of each summary of the episode (`context.builder: compact`)."""


@dataclass
class Rollout:
    """Everything an episode needs that is shared by all episodes of an actor."""

    engine: Engine
    tokenizer: Any
    builder: ContextBuilder
    env_name: str
    actor_id: str
    max_model_len: int
    max_turns: int
    step_timeout_s: float
    counters: ActorCounters = field(default_factory=ActorCounters)
    delta_records: bool = False
    """Send a step whose context extends the previous step's as a delta (wire/delta.py)."""
    errors: EnvErrorLog = field(init=False)

    def __post_init__(self) -> None:
        self.errors = EnvErrorLog(self.env_name, self.counters)

    @classmethod
    def from_config(
        cls, cfg: RunConfig, engine: Engine, tokenizer: Any, env_name: str, actor_id: str,
        delta_records: bool = False,
    ) -> Rollout:
        """The rollout a run's actors (`delta_records` from `actors.delta_records`) and its
        held-out evaluation (whole records) use. Raises ValueError naming the key when a
        `compact` budget leaves no room for the compaction request and a summary."""
        builder = make_context_builder(cfg.context, tokenizer)
        if isinstance(builder, CompactContext):
            problem = builder.room_problem(tokenizer, cfg.model.max_model_len)
            if problem:
                raise ValueError(problem)
        return cls(
            engine=engine, tokenizer=tokenizer, builder=builder, env_name=env_name,
            actor_id=actor_id, max_model_len=cfg.model.max_model_len,
            max_turns=cfg.env.max_turns, step_timeout_s=cfg.env.step_timeout_s,
            delta_records=delta_records,
        )

    async def run(
        self, env: Env | Callable[[], Env], task: Task, ids: EpisodeIds, emit: Emit
    ) -> EpisodeEnd:
        """Run one episode to its end; never raises for env / engine failures.

        `env` may be a factory (an `EnvSpec.make`): a failure to build the env is then an
        `env_error` of this episode too.
        """
        t0 = time.perf_counter()
        st = _State()
        self.counters.in_flight += 1
        try:
            await self._loop(env, task, ids, emit, st)
        except _EpisodeOver as e:
            st.status, st.reason = e.status, e.reason
            if e.method:
                self.errors.record(e.kind, e.method, e.reason, task.task_id, e.exc)
        except asyncio.CancelledError:
            st.status, st.reason = "aborted", "actor stopped"
            await self._end(task, ids, emit, st, t0)
            raise
        finally:
            self.counters.in_flight -= 1
        return await self._end(task, ids, emit, st, t0)

    async def _loop(
        self, env: Env | Callable[[], Env], task: Task, ids: EpisodeIds, emit: Emit, st: _State
    ) -> None:
        if not isinstance(env, Env):
            try:
                env = env()
            except Exception as e:
                raise _env_failed("make", e, "making the env") from e
        history = History(self.tokenizer)
        obs = await self._env_call(env, lambda: env.reset(task), "reset")
        try:
            obs = check_observation(obs, "env.reset")
        except EnvContractError as e:
            raise _violation("reset", e) from None
        self._extend(history, obs.messages, obs.tools)
        encoder = DeltaEncoder(self.delta_records)
        compact = self.builder if isinstance(self.builder, CompactContext) else None
        env_metrics = MAX_METRICS - (len(CONTEXT_METRICS) if compact else 0)
        while True:
            # A summary step needs a step after it for the next action (env.max_turns).
            if compact is not None and st.steps + 1 < self.max_turns and compact.due(history):
                await self._summarize(compact, history, task, ids, emit, st, encoder)
            context = self._context(history, task)
            gen = await self._generate(context)
            text = self.tokenizer.decode(gen.action_ids, skip_special_tokens=True)
            t_env = time.perf_counter()
            raw = await self._env_call(env, functools.partial(env.step, text), "step")
            env_s = time.perf_counter() - t_env
            try:  # checked before anything of this step is used or sent
                result = check_step_result(raw, "env.step")
                merged = {**st.metrics, **result.metrics}  # every step's; a later value wins
                if len(merged) > env_metrics:
                    mine = (f" ({MAX_METRICS - env_metrics} more are the context builder's)"
                            if env_metrics < MAX_METRICS else "")
                    raise EnvContractError(
                        "env.step", "StepResult.metrics", len(merged), "", "ValueError",
                        message=f"env.step: the StepResult.metrics of this episode's steps "
                                f"hold {len(merged)} names; at most {env_metrics} are kept"
                                f"{mine}")
            except EnvContractError as e:
                raise _violation("step", e) from None
            history.add_action(gen.action_ids)
            cut = not result.done and st.steps + 1 >= self.max_turns
            await emit(self._record(task, ids, st.steps, encoder.encode(
                st.steps, context, gen.action_ids), gen, result, env_s, cut))
            st.steps += 1
            st.metrics = merged
            if result.done or cut:
                st.outcome = result.outcome_reward if result.done else 0.0
                if cut:
                    st.status, st.reason = "truncated", f"no answer after env.max_turns={self.max_turns}"
                elif result.truncated:
                    st.status = "truncated"
                return
            self._extend(history, result.observation.messages)

    async def _summarize(
        self, compact: CompactContext, history: History, task: Task, ids: EpisodeIds,
        emit: Emit, st: _State, encoder: DeltaEncoder,
    ) -> None:
        """The summary step (`context.builder: compact`): sampled, folded into the history
        and recorded; the env never sees it."""
        try:
            context = compact.summary_context(history)
        except Exception as e:
            raise _env_failed("context", e, "context builder") from e
        self._fits(context, history, task)
        gen = await self._generate(context, compact.summary_max_tokens)
        compact.add_summary(history, gen.action_ids)
        await emit(self._record(task, ids, st.steps, encoder.encode(
            st.steps, context, gen.action_ids), gen, _SUMMARY_STEP, 0.0, False))
        st.steps += 1
        st.summary_tokens.append(len(gen.action_ids))

    def _context(self, history: History, task: Task) -> list[int]:
        try:
            context = self.builder.build(history)
        except Exception as e:
            raise _env_failed("context", e, "context builder") from e
        self._fits(context, history, task)
        return context

    def _fits(self, context: list[int], history: History, task: Task) -> None:
        """A context with room for an action; else the episode ends (the first context:
        the env's prompt is too long; a later one: truncated)."""
        if len(context) >= self.max_model_len and not history.turns:
            e = prompt_too_long(len(context), self.max_model_len, task.task_id)
            raise _violation("reset", e)
        if len(context) >= self.max_model_len:
            raise _EpisodeOver(
                "truncated",
                f"context of {len(context)} tokens reaches model.max_model_len={self.max_model_len}",
            )

    def _extend(
        self, history: History, messages: list[dict[str, str]], tools: list | None = None
    ) -> None:
        try:
            history.add_messages(messages, tools)
        except Exception as e:
            raise _env_failed("messages", e, "bad env messages") from e

    async def _generate(self, context: list[int], max_new_tokens: int | None = None) -> GenResult:
        t0 = time.perf_counter()
        try:  # the engine caps its token budget by the room left in max_model_len
            gen = await self.engine.generate(context, max_new_tokens)
        except Exception as e:
            raise _EpisodeOver("engine_error", f"{type(e).__name__}: {e}") from e
        finally:
            self.counters.gen_time_s += time.perf_counter() - t0
        gen.gen_time_s = time.perf_counter() - t0
        self.counters.tokens += len(gen.action_ids)
        if not gen.action_ids:
            raise _EpisodeOver("engine_error", f"engine returned no tokens ({gen.finish_reason})")
        return gen

    async def _env_call(self, env: Env, call: Callable[[], Awaitable[Any]], what: str) -> Any:
        """Await one env call on a worker thread (offload.py): a synchronous block inside the
        env cannot stall the other episodes of this actor, and the timeout still fires."""
        t0 = time.perf_counter()
        try:
            return await run_offloaded(call, self.step_timeout_s, f"{type(env).__name__}.{what}")
        except TimeoutError as e:
            raise _EpisodeOver(
                "timeout", f"env.{what} took longer than env.step_timeout_s={self.step_timeout_s}"
                f"{_detail(e)}", what, "timeout",
            ) from None
        except Exception as e:
            raise _env_failed(what, e) from e
        finally:
            self.counters.env_time_s += time.perf_counter() - t0

    def _record(
        self, task: Task, ids: EpisodeIds, index: int, context: Encoded,
        gen: GenResult, result: StepResult, env_s: float, cut: bool,
    ) -> StepRecord:
        """The step's record; `context`: its context fields (wire/delta.py)."""
        return StepRecord(
            episode_id=ids.episode_id, group_id=ids.group_id, task_id=task.task_id,
            actor_id=self.actor_id, env_name=self.env_name, step_index=index,
            context_ids=context.context_ids, context_from=context.context_from,
            context_len=context.context_len, context_crc=context.context_crc,
            action_ids=TokenIds(gen.action_ids),
            behavior_logprobs=LogProbs(gen.logprobs),
            policy_version=gen.policy_version, process_reward=result.reward,
            done=result.done or cut, finish_reason=gen.finish_reason,
            token_versions=gen.token_versions, gen_time_s=gen.gen_time_s, env_time_s=env_s,
            num_tool_calls=result.num_tool_calls, created_at=time.time(),
        )

    async def _end(
        self, task: Task, ids: EpisodeIds, emit: Emit, st: _State, t0: float
    ) -> EpisodeEnd:
        return await self.end_episode(task, ids, emit, st.status, st.steps, st.outcome,
                                      st.reason, {**st.metrics, **self._context_metrics(st)},
                                      t0)

    def _context_metrics(self, st: _State) -> dict[str, float]:
        """`CONTEXT_METRICS` of a `compact` episode: its compactions (every episode), the mean
        summary length and whether it succeeded (episodes with a compaction only, so their
        means are over those)."""
        if not isinstance(self.builder, CompactContext):
            return {}
        n = len(st.summary_tokens)
        out = {"context/compactions": float(n)}
        if n:
            success = st.metrics.get("success", st.outcome) > 0 and st.status == "ok"
            out["context/summary_tokens"] = sum(st.summary_tokens) / n
            out["context/success_after_compaction"] = float(success)
        return out

    async def end_episode(
        self, task: Task, ids: EpisodeIds, emit: Emit, status: EpisodeStatus, steps: int,
        outcome: float, reason: str, metrics: dict[str, float], t0: float,
    ) -> EpisodeEnd:
        """An episode's one end record, counted and sent (this rollout's and a black-box
        episode's, endpoint/episodes.py)."""
        self.errors.episode_ended(status, reason, task.task_id)
        if status in TRAINABLE_STATUSES:
            self.counters.episodes_done += 1
        else:
            self.counters.episodes_failed += 1
        end = EpisodeEnd(
            episode_id=ids.episode_id, group_id=ids.group_id, task_id=task.task_id,
            actor_id=self.actor_id, env_name=self.env_name, num_steps=steps,
            outcome_reward=outcome, status=status, group_size=ids.group_size, metrics=metrics,
            error=reason, wall_time_s=time.perf_counter() - t0, created_at=time.time(),
        )
        await emit(end)
        return end

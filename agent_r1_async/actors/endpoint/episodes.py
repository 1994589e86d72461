"""Episodes of an agent we did not write: one endpoint session each, its calls the steps.

`open_blackbox_runner` gives the actor (actors/runner.py `open_runner`, for an env definition
that is an `AgentDefinition`: envs/agent.py) a `BlackboxRunner` with the actor's endpoint
started on the actor's loop (`endpoint.host`, `endpoint.port` + the actor's index,
`endpoint.auth`: auth.py).

A black-box episode:
1. opens a session (sessions.py) for the episode, at most `env.max_turns` calls;
2. awaits the definition's `run_agent(task, base_url, api_key, session_id)`, which runs the
   user's function on a worker thread under its timeout and returns its reward; `api_key` is
   the session's own token, or the actor's for a definition whose `credential` is "actor"
   (a server the actor starts, which plays every episode: verifiers);
3. closes the session (later calls get 410), sends the last step and one `EpisodeEnd`.

How it ends (one line in `EpisodeEnd.error`; env failures logged once and counted by kind,
as a rollout's are):
- `ok`, outcome = the returned reward, when the agent returned and every call was served;
- `engine_error` when the engine failed a call, whatever the agent then did;
- `env_error` when the agent's first context alone filled `model.max_model_len`, when the
  agent raised or returned something other than a real number (`AgentFailed`), or when it
  made no call on its session (nothing to train: it must send its requests to its base URL);
- `timeout` when the agent ran past its timeout (the thread is abandoned; its calls now fail);
- `truncated`, outcome 0, when a call was refused for `env.max_turns` or for length after the
  first step (the steps before it stay trainable), even if the agent then raised;
- `aborted` when the actor stops (the agent's thread is cancelled or abandoned).
Its metrics: `calls` (generation calls admitted) and `divergences` (segments.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from agent_r1_async.actors.endpoint.auth import actor_token
from agent_r1_async.actors.endpoint.params import EngineSampling
from agent_r1_async.actors.endpoint.recorder import StepRecorder
from agent_r1_async.actors.endpoint.server import Endpoint
from agent_r1_async.actors.endpoint.service import GenerationService
from agent_r1_async.actors.endpoint.sessions import Session, SessionStore
from agent_r1_async.actors.rollout import Emit, EpisodeIds, Rollout
from agent_r1_async.config import ConfigError, RunConfig
from agent_r1_async.envs.agent import AgentDefinition, AgentFailed, AgentOutcome
from agent_r1_async.wire.messages import TRAINABLE_STATUSES, EpisodeEnd, EpisodeStatus

log = logging.getLogger(__name__)


@dataclass
class _Verdict:
    status: EpisodeStatus = "ok"
    reason: str = ""
    outcome: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    """The agent's own episode metrics (AgentOutcome)."""
    kind: str = ""
    """Set for an env failure to log and count."""
    exc: BaseException | None = None


class BlackboxRunner:
    """Episodes played by an agent function through the actor's endpoint (module docstring)."""

    def __init__(self, rollout: Rollout, endpoint: Endpoint, agent: AgentDefinition) -> None:
        self.rollout, self.endpoint, self.agent = rollout, endpoint, agent

    @property
    def sessions(self) -> SessionStore:
        return self.endpoint.service.sessions

    async def run(self, task: Any, ids: EpisodeIds, emit: Emit) -> EpisodeEnd:
        """Play one episode to its end; never raises for the agent's or the engine's failures."""
        t0 = time.perf_counter()
        r = self.rollout
        recorder = StepRecorder(ids, task.task_id, r.actor_id, r.env_name, emit,
                                r.delta_records)
        session = self.sessions.open(
            Session(SessionStore.new_id(), r.tokenizer, r.max_turns, recorder))
        r.counters.in_flight += 1
        try:
            verdict = await self._play(task, session)
        except asyncio.CancelledError:
            await self._end(task, ids, emit, session, _Verdict("aborted", "actor stopped"), t0)
            raise
        finally:
            r.counters.in_flight -= 1
        return await self._end(task, ids, emit, session, verdict, t0)

    async def _play(self, task: Any, session: Session) -> _Verdict:
        sid = session.session_id
        url = self.endpoint.session_url(sid)
        key = (self.endpoint.api_key if credential(self.agent) == "actor"
               else self.endpoint.session_key(session))
        try:
            reward = await self.agent.run_agent(task, url, key, sid)
        except AgentFailed as e:
            return _Verdict(e.status, e.message, kind=e.kind, exc=e.__cause__ or e)
        except Exception as e:  # a definition that does not wrap its failures
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            return _Verdict("env_error", f"agent {self.agent.agent_name}: {type(e).__name__}: "
                            f"{first}", kind=type(e).__name__, exc=e)
        if isinstance(reward, AgentOutcome):
            return _Verdict("ok", outcome=float(reward.reward), metrics=dict(reward.metrics))
        return _Verdict("ok", outcome=float(reward))

    @staticmethod
    def _settle(verdict: _Verdict, session: Session) -> _Verdict:
        """The episode's verdict, given how the session's calls went (module docstring): an
        actor stop wins, then a failed call, then the agent's own result."""
        if verdict.status == "aborted" or session.cut is None:
            return verdict
        status, reason = session.cut
        return _Verdict(status, reason, kind="context_length" if status == "env_error" else "")

    def _no_calls(self) -> _Verdict:
        return _Verdict("env_error", f"agent {self.agent.agent_name} made no generation call on "
                        f"its session (its base URL is {self.endpoint.url}/sessions/ID/v1): the "
                        "episode has nothing to train", kind="no_calls")

    async def _end(self, task: Any, ids: EpisodeIds, emit: Emit, session: Session,
                   verdict: _Verdict, t0: float) -> EpisodeEnd:
        r = self.rollout
        self.sessions.close(session)
        r.counters.env_time_s += time.perf_counter() - session.idle_since  # the agent's last stretch
        verdict = self._settle(verdict, session)
        assert session.recorder is not None
        steps = await session.recorder.finish(done=verdict.status in TRAINABLE_STATUSES)
        if verdict.status == "ok" and steps == 0:
            verdict = self._no_calls()
        if verdict.kind:
            r.errors.record(verdict.kind, "agent", verdict.reason, task.task_id, verdict.exc)
        return await r.end_episode(
            task, ids, emit, verdict.status, steps,
            verdict.outcome if verdict.status == "ok" else 0.0, verdict.reason,
            {**verdict.metrics, "calls": float(session.admitted),
             "divergences": float(session.segments.divergences)},
            t0)

    async def close(self) -> None:
        await self.endpoint.stop()


def _vocab_size(cfg: RunConfig, tokenizer: Any) -> int:
    from agent_r1_async.models import model_vocab_size

    try:
        rows = model_vocab_size(cfg.model.start_from)
    except (OSError, ValueError, KeyError):
        rows = 0
    return rows or len(tokenizer)


def credential(agent: Any) -> str:
    """Which token an agent definition's episodes are given: `session` (each episode its
    own), `actor` (a server of the actor's that plays every episode), or `none` (a function
    that takes no api_key, so it cannot authenticate)."""
    return str(getattr(agent, "credential", "session"))


def check_credentials(cfg: RunConfig, agent: Any) -> None:
    """ConfigError when the endpoint authenticates calls (`endpoint.auth: token`) and the
    agent has no way to present a token."""
    if cfg.endpoint.auth == "token" and credential(agent) == "none":
        name = getattr(agent, "agent_name", "the agent")
        raise ConfigError(
            f"config key `env.args.agent`: {name} takes no api_key, and the generation "
            "endpoint authenticates every call (endpoint.auth: token): declare an api_key "
            "parameter and send it as the client's key (OpenAI(base_url=..., "
            "api_key=api_key)); `endpoint.auth: none` turns the check off, for a trusted "
            "single-user machine only")


async def open_blackbox_runner(cfg: RunConfig, agent: AgentDefinition, rollout: Rollout,
                               transport: Any, index: int) -> BlackboxRunner:
    """The runner of `agent`'s episodes, its endpoint serving when this returns (close it
    with `close()`)."""
    check_credentials(cfg, agent)
    service = GenerationService(
        engine=rollout.engine, tokenizer=rollout.tokenizer, builder=rollout.builder,
        sampling=EngineSampling.from_config(cfg.engine), max_model_len=rollout.max_model_len,
        vocab_size=_vocab_size(cfg, rollout.tokenizer), model_name=cfg.model.name_or_path,
        counters=rollout.counters,
    )
    port = cfg.endpoint.port + index if cfg.endpoint.port else 0
    endpoint = Endpoint(service, cfg.endpoint.host, port, actor_token(transport),
                        cfg.endpoint.auth)
    url = await endpoint.start()
    rollout.counters.endpoint_url = url
    log.info("%s: generation endpoint on %s (agent %s)", rollout.actor_id, url, agent.agent_name)
    return BlackboxRunner(rollout, endpoint, agent)

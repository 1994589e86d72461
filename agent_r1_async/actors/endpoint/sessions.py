"""Sessions: the calls of one episode's agent, and the endpoint's open ones.

A session is opened by a black-box episode (episodes.py) under a fresh unguessable id and a
fresh bearer token of its own (auth.py), and closed when the episode ends. A request carrying
a session's token lands in that session. One carrying the actor's token names its session
by, in this order: the URL path (`/sessions/ID/v1/chat/completions`,
`/sessions/ID/inference/v1/generate`: the base URL an agent is given), the `X-Session-Id`
header, or the chat request's `user` field; naming none, it is served and not recorded. A
request that names a session that is not open is refused (404), and so is a call into a
session whose episode has ended (410).

A session holds its chat segments (segments.py), its step recorder (recorder.py), the count
of calls it admitted (at most `max_calls`: `env.max_turns`), and `cut`: why its episode must
end other than as the agent says, should a call have failed:
- `truncated`: a call past `max_calls`, or a context with no room left in
  `model.max_model_len` after the first step (earlier steps stay trainable, outcome 0);
- `env_error`: the agent's first context alone fills `model.max_model_len`;
- `engine_error`: the engine failed a request.
The most severe one wins (engine_error, then env_error, then truncated).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agent_r1_async.actors.endpoint.auth import new_token, token_digest
from agent_r1_async.actors.endpoint.params import RequestError
from agent_r1_async.actors.endpoint.recorder import StepRecorder
from agent_r1_async.actors.endpoint.segments import Segments
from agent_r1_async.wire.messages import EpisodeStatus

SESSION_HEADER = "X-Session-Id"
ENDED_TOKENS_KEPT = 4096
"""Tokens of ended sessions remembered, so their late calls are told 410 rather than 401."""
_SEVERITY = {"truncated": 0, "env_error": 1, "engine_error": 2}


class Session:
    def __init__(self, session_id: str, tokenizer: Any, max_calls: int | None = None,
                 recorder: StepRecorder | None = None) -> None:
        self.session_id = session_id
        self.segments = Segments(tokenizer)
        self.max_calls = max_calls
        self.recorder = recorder
        self.admitted = 0
        self.cut: tuple[EpisodeStatus, str] | None = None
        self.closed = False
        self.token = ""
        """The bearer token of this session's agent (set when the store opens it)."""
        self.idle_since = time.perf_counter()
        """When the agent last got an answer (or the session opened)."""

    @property
    def recorded(self) -> bool:
        return self.recorder is not None

    def end_with(self, status: EpisodeStatus, reason: str) -> None:
        """Note why the episode must end `status` (the most severe reason wins)."""
        if self.cut is None or _SEVERITY[status] > _SEVERITY[self.cut[0]]:
            self.cut = (status, reason)

    def admit(self) -> float:
        """Admit one more call (RequestError when the session is closed or its calls are
        used up); the agent's seconds since its previous answer."""
        if self.closed:
            raise RequestError("this session's episode has ended", 410,
                               "invalid_request_error", "session_ended")
        if self.max_calls is not None and self.admitted >= self.max_calls:
            reason = f"the agent made more than env.max_turns={self.max_calls} generation calls"
            self.end_with("truncated", reason)
            raise RequestError(f"{reason}: this episode takes no more", 400,
                               "invalid_request_error", "max_turns")
        self.admitted += 1
        return time.perf_counter() - self.idle_since


class SessionStore:
    """The open sessions of one endpoint."""

    def __init__(self) -> None:
        self._open: dict[str, Session] = {}
        self._tokens: dict[bytes, Session] = {}
        self._ended: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(24)

    def open(self, session: Session) -> Session:
        """Serve `session` under its id and a new token of its own (`session.token`)."""
        session.token = new_token()
        self._open[session.session_id] = session
        self._tokens[token_digest(session.token)] = session
        return session

    def close(self, session: Session) -> None:
        session.closed = True
        self._open.pop(session.session_id, None)
        digest = token_digest(session.token)
        if self._tokens.pop(digest, None) is not None:
            self._ended[digest] = None
            while len(self._ended) > ENDED_TOKENS_KEPT:
                self._ended.popitem(last=False)

    def by_token(self, token: str) -> Session | None:
        """The open session whose token this is."""
        return self._tokens.get(token_digest(token))

    def token_ended(self, token: str) -> bool:
        """Whether this is the token of a recently ended session."""
        return token_digest(token) in self._ended

    def get(self, session_id: str) -> Session:
        session = self._open.get(session_id)
        if session is None:
            raise RequestError("no open session with this id (a session lives as long as its "
                               "episode)", 404, "not_found_error", "unknown_session")
        return session

    def close_all(self) -> None:
        for session in list(self._open.values()):
            self.close(session)


@dataclass(frozen=True)
class Caller:
    """Who sent a request (auth.py): the actor (its token, or anyone under
    `endpoint.auth: none`) or the agent of one session (that session's token)."""

    session: Session | None = None
    """The session whose token the request carries; None for the actor."""


ACTOR = Caller()

"""The wire schema: every message that crosses a socket, as msgspec Structs.

Design choices
- msgspec MessagePack with typed decoders; nothing on any socket is ever unpickled. A frame
  that does not decode to the expected type raises `WireError` (one typed error) and is
  counted by the receiver; it is never executed.
- `array_like=True`: a struct is encoded as a positional array, so **field order is the wire
  format**. Add new fields at the end, with defaults, and bump `SCHEMA_VERSION` when an old
  peer could misread a new frame.
- Token ids and log-probs travel packed: `TokenIds` (int32) and `LogProbs` (float64) are
  `array.array`s encoded as one MessagePack `bin` each, so a 600-token step decodes as three
  memcpys instead of 600 Python ints (`bench/bench_transport.py`: 4x faster to decode). A
  struct built with plain lists still encodes (as MessagePack arrays) and decodes to the
  packed types; the arrays compare equal to lists of the same values.
- This module imports nothing heavy (no torch, no tokenizer), so every process can use it.
- Peers check `SCHEMA_VERSION` on connect with `Hello` / `HelloAck` over the control socket.

Message families
- Data (actor -> buffer, PUSH/PULL): `StepRecord`, `EpisodeEnd`, `ActorStats`, one per
  frame, or several in one `DataBatch` frame (an actor coalesces what it emits within one turn of
  its event loop; items in send order, no nested batches). `unpack_data` turns a received
  message into its data messages.
- Control (actor/learner <-> buffer, DEALER/ROUTER): `Hello`, `CreditRequest`,
  `SampleRequest`, `VersionUpdate`, `StatsRequest` and their replies.
- Weights (learner -> actors, PUB/SUB): a `WeightsHeader` frame followed by one raw frame per
  tensor, in header order.

Why one module over ~400 lines: the schema is read as a whole (field order is the format),
and a single module keeps every tagged union and its decoder beside the structs it covers.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

SCHEMA_VERSION = 6
"""2: packed `TokenIds` / `LogProbs` fields in StepRecord.
3: `DataBatch` frames (several data messages in one frame); `ActorStats.tokens_total`.
4: delta step records (`StepRecord.context_from`, `context_len`; wire/delta.py).
5: failed episodes for the learner's episode samples (`SampleRequest.failed_episodes`,
`SampleBatch.failed`).
6: `StepRecord.context_crc` (the whole context's CRC-32, checked by the learner)."""

# Limits every side agrees on: an env's values are checked against them in the rollout
# (envs/contract.py) and every record again at the buffer's ingest (buffers/validate.py).
MAX_ABS_REWARD = 1e6
"""Largest |reward| accepted: far beyond any env's scale, small enough that squares and sums
of a group's returns stay finite in float64."""
MAX_COUNT = 1 << 40
"""Largest counter accepted (tool calls, episodes, tokens)."""
MAX_METRICS = 64
"""Most named metrics one EpisodeEnd may carry (each becomes a logged key)."""

EpisodeStatus = Literal["ok", "env_error", "truncated", "aborted", "engine_error", "timeout"]
"""How an episode ended. Only "ok" and "truncated" episodes are trainable."""

TRAINABLE_STATUSES: frozenset[str] = frozenset({"ok", "truncated"})


class WireError(ValueError):
    """A frame that is not a valid message of the expected type (bad bytes, wrong schema)."""


if TYPE_CHECKING:
    _Array = array[Any]  # generic in typeshed; the runtime class takes no subscript (3.11)
else:
    _Array = array


class _Packed(_Array):
    """An `array.array` of one fixed typecode that compares by value with any sequence."""

    TYPECODE = "i"

    def __new__(cls, data: Iterable[Any] | bytes = (), *rest: Any) -> _Packed:
        if isinstance(data, str) and rest:  # array's own (typecode, data) form: unpickling
            return super().__new__(cls, data, *rest)
        return super().__new__(cls, cls.TYPECODE, data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, array | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # mutable, like list


class TokenIds(_Packed):
    """Token ids, packed as native int32 (4 bytes each on the wire)."""

    TYPECODE = "i"


class LogProbs(_Packed):
    """Log-probabilities, packed as float64 (bit-exact with Python floats)."""

    TYPECODE = "d"


if sys.byteorder != "little":  # the wire is little-endian; nothing here byteswaps
    raise ImportError("agent_r1_async.wire.messages: big-endian hosts are not supported")
if array("i").itemsize != 4:
    raise ImportError("agent_r1_async.wire.messages: C int is not 4 bytes on this host")


def enc_hook(obj: Any) -> Any:
    """msgspec encode hook: packed arrays go out as one `bin`."""
    if isinstance(obj, array):
        return obj.tobytes()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_new_array = array.__new__
_TYPECODES: dict[type, str] = {t: t.TYPECODE for t in (TokenIds, LogProbs)}


def dec_hook(typ: type, obj: Any) -> Any:
    """msgspec decode hook: `bin` (or, from a struct built with lists, an array) -> packed.

    Raises only TypeError / ValueError (a byte count that is not a whole number of items, a
    value of the wrong type or out of range), which msgspec turns into a ValidationError.
    """
    code = _TYPECODES.get(typ)
    if code is None:
        raise NotImplementedError(f"cannot decode {typ!r}")
    if type(obj) is not bytes and type(obj) is not list:
        raise TypeError(f"expected bin or array for {typ.__name__}, got {type(obj).__name__}")
    try:
        return _new_array(typ, code, obj)  # bytes: one memcpy (frombytes)
    except OverflowError as e:
        raise ValueError(f"{typ.__name__}: {e}") from None


class _Wire(msgspec.Struct, array_like=True, gc=False, omit_defaults=False):
    """Base for wire structs: positional encoding, no GC tracking (they hold no cycles)."""


# --------------------------------------------------------------------------------------
# Data plane: actor -> buffer
# --------------------------------------------------------------------------------------


class StepRecord(_Wire, tag="step"):
    """One agent step: the context the model saw and the action it sampled.

    `context_ids` is the context of this step (built by the actor's context builder from the
    interaction history): all of it, or, in a delta record (`context_from` >= 0), only the
    tokens after the previous step's context + action (wire/delta.py). `action_ids` are the
    exact token ids the engine sampled, never re-tokenized. `behavior_logprobs[i]` is the
    engine's log-prob of `action_ids[i]`.
    """

    episode_id: str
    group_id: str
    task_id: str
    actor_id: str
    env_name: str
    step_index: int
    context_ids: TokenIds
    action_ids: TokenIds
    behavior_logprobs: LogProbs
    policy_version: int
    """Weight version that generated the action (the oldest one if `token_versions` is set)."""
    process_reward: float = 0.0
    done: bool = False
    finish_reason: str = "stop"
    """Engine finish reason: "stop" (eos/stop string), "length" (token budget), "abort"."""
    token_versions: list[int] = []
    """Per-action-token versions when an action spans a weight update; empty = all equal."""
    gen_time_s: float = 0.0
    env_time_s: float = 0.0
    num_tool_calls: int = 0
    created_at: float = 0.0
    """Unix time the record was sent."""
    context_from: int = -1
    """-1: `context_ids` is the whole context. Else `step_index - 1`: this step's context is
    that step's context + action + `context_ids` (a delta record)."""
    context_len: int = 0
    """The whole context's length in tokens (a delta's; 0 or `len(context_ids)` otherwise)."""
    context_crc: int = -1
    """CRC-32 of the whole context's int32 bytes as the actor saw it (-1: none); the learner
    checks the context it rebuilds against it (wire/delta.py)."""


class EpisodeEnd(_Wire, tag="episode_end"):
    """The end of one episode: its outcome reward and how it ended."""

    episode_id: str
    group_id: str
    task_id: str
    actor_id: str
    env_name: str
    num_steps: int
    outcome_reward: float
    status: EpisodeStatus
    group_size: int
    """Number of episodes in this episode's group (same task)."""
    metrics: dict[str, float] = {}
    """Named per-episode metrics from the env (em, f1, success, format_ok, ...)."""
    error: str = ""
    """A one-line reason when status is not "ok"."""
    wall_time_s: float = 0.0
    created_at: float = 0.0


class ActorStats(_Wire, tag="actor_stats"):
    """Periodic throughput and state report of one actor."""

    actor_id: str
    time: float
    policy_version: int
    tokens_per_s: float
    episodes_per_s: float
    gen_time_s: float
    env_time_s: float
    episodes_in_flight: int
    episodes_done: int
    episodes_failed: int
    weight_sync_latency_s: float = 0.0
    """Time from the learner publishing the current version to this actor serving it."""
    tokens_total: int = 0
    """Action tokens generated since the actor started: rates over any window are differences
    (`tokens_per_s` covers only the last `actors.stats_interval_s`)."""
    env_errors: dict[str, int] = {}
    """Env failures since the actor started, per kind (exception type name, "timeout")."""
    failed_streak: int = 0
    """Consecutive ended episodes that failed (not counting "aborted" ones)."""
    last_error: str = ""
    """The most recent failed episode's one-line reason (env, task, method, exception)."""
    progress_age_s: float = 0.0
    """Seconds, as of this report, since the actor last made progress: an engine or env call
    returned or an episode ended, or it had no episode in flight. A hung engine step keeps it
    growing while the reports still come (run/processes/liveness.py judges it)."""
    endpoint_requests: dict[str, int] = {}
    """Requests the actor's generation endpoint answered since it started, per status class
    (`2xx`, `401`, `4xx`, `5xx`); empty for an actor that serves none."""
    endpoint_url: str = ""
    """The root URL of the actor's generation endpoint ("" when it serves none)."""


DataMessage = StepRecord | EpisodeEnd | ActorStats


class DataBatch(_Wire, tag="batch"):
    """Several data messages in one frame, in the order they were emitted (never empty). Its
    tag, "batch", is the wire format, not the class name."""

    items: list[DataMessage]


class _RawDataBatch(_Wire, tag="batch"):
    """`DataBatch` with already-encoded items: the same bytes as a `DataBatch` of the decoded
    items."""

    items: list[msgspec.Raw]


DataFrame = DataMessage | DataBatch
"""What one data-plane frame decodes to."""

# --------------------------------------------------------------------------------------
# Control plane: DEALER (actor / learner) <-> ROUTER (buffer)
# --------------------------------------------------------------------------------------


class Hello(_Wire, tag="hello"):
    """First message on a control connection; the server checks `schema_version`."""

    schema_version: int
    role: Literal["actor", "learner"]
    peer_id: str


class HelloAck(_Wire, tag="hello_ack"):
    ok: bool
    schema_version: int
    reason: str = ""
    learner_version: int = 0
    """The buffer's learner version: a (re)started actor knows how far behind its engine's
    weights are before it asks for its first credit."""


class CreditRequest(_Wire, tag="credit_request"):
    """An actor asks for admission to start up to `max_groups` new groups (0: it only
    reports what it runs)."""

    actor_id: str
    max_groups: int
    held: list[str] | None = None
    """The groups the actor runs now (None: not said); the buffer reconciles its credits
    with them (buffers/reclaim.py)."""


class CreditGrant(_Wire, tag="credit_grant"):
    """How many groups the actor may start now, and the learner version the buffer knows."""

    actor_id: str
    groups: int
    learner_version: int
    reason: str = ""
    """Why fewer were granted than asked (staleness bound, memory full, ...)."""
    group_ids: list[str] = []
    """Ids the buffer allocated for the granted groups (actors should use them as group_id)."""
    unknown: list[str] = []
    """Groups of the request's `held` that hold no credit of this actor here (never granted
    by this buffer, or dropped): the actor stops them, as their records would be refused."""


class Episode(_Wire):
    """An assembled episode: its steps in order and its end record."""

    steps: list[StepRecord]
    end: EpisodeEnd


class Group(_Wire):
    """The episodes of one task (the unit of GRPO baselines and of sampling)."""

    group_id: str
    task_id: str
    env_name: str
    episodes: list[Episode]


class SampleRequest(_Wire, tag="sample_request"):
    """The learner asks for a batch of `num_groups` complete groups."""

    num_groups: int
    learner_version: int
    timeout_s: float = 0.0
    """How long the buffer may wait for enough groups before answering "not ready"."""
    failed_episodes: int = 0
    """Failed episodes wanted with the batch (`SampleBatch.failed`): the learner asks when it
    samples episodes for a person to read (`logging.episodes_every`), 0 otherwise."""


class SampleBatch(_Wire, tag="sample_batch"):
    """Groups sampled for one update, with importance weights of prioritized sampling."""

    groups: list[Group]
    is_weights: list[float]
    """`(N·P(i))^-β / max_j (N·P(j))^-β` per group, 1.0 in FIFO mode."""
    learner_version: int
    ready: bool = True
    """False when the buffer could not fill the batch in time (groups is then empty)."""
    reason: str = ""
    failed: list[Episode] = []
    """Up to `SampleRequest.failed_episodes` failed episodes (status env_error, engine_error
    or timeout) the buffer kept since it last handed some out, newest first: never trained,
    only shown (the learner's episode sample)."""


class VersionUpdate(_Wire, tag="version_update"):
    """The learner tells the buffer its new policy version (drives staleness)."""

    version: int


class VersionAck(_Wire, tag="version_ack"):
    version: int


class StatsRequest(_Wire, tag="stats_request"):
    pass


class BufferStats(_Wire, tag="buffer_stats"):
    """A snapshot of buffer metrics."""

    time: float
    learner_version: int
    groups_ready: int
    groups_assembling: int
    episodes_stored: int
    bytes_stored: int
    in_flight_groups: int
    accepted_groups: int
    sampled_groups: int
    drops: dict[str, int]
    """Counts by reason: stale, expired, malformed, reuse_exhausted, failed_episode, ..."""
    staleness_hist: dict[int, int]
    """Token-weighted staleness histogram of sampled data: staleness -> action tokens."""
    ingest_records_per_s: float = 0.0
    actors: dict[str, ActorStats] = {}
    """The latest ActorStats of each actor, by actor id."""
    records_per_frame: float = 0.0
    """Mean data messages per received data frame since the service started (coalescing)."""
    actor_silence_s: dict[str, float] = {}
    """Per actor with a report (or a credit) since it was last reclaimed: seconds without
    progress (its reports' `progress_age_s`), counting only time the buffer's loop was
    listening, so a stalled buffer never makes its actors look silent."""
    actor_credits: dict[str, int] = {}
    """Credits each actor holds (groups granted and not yet complete), by actor id."""
    sample_waiting: int = 0
    """Groups the learner's waiting SampleRequest asks for (0: no request waits)."""
    records: int = 0
    """Data messages received since the run began (kept in the buffer's snapshots): what a
    restarted buffer lacks of it against its predecessor's last count was lost with it."""
    episode_bytes_mean: float = 0.0
    """Mean memory (`approx_nbytes`) of an episode the buffer stores: linear in its steps with
    delta records (wire/delta.py), quadratic without."""


class ErrorReply(_Wire, tag="error"):
    """A request that could not be served (malformed, wrong schema, unknown type)."""

    reason: str


ControlMessage = (
    Hello
    | HelloAck
    | CreditRequest
    | CreditGrant
    | SampleRequest
    | SampleBatch
    | VersionUpdate
    | VersionAck
    | StatsRequest
    | BufferStats
    | ErrorReply
)

# --------------------------------------------------------------------------------------
# Weights: learner -> actors (PUB/SUB), header frame + one raw frame per tensor
# --------------------------------------------------------------------------------------


class TensorMeta(_Wire):
    name: str
    dtype: str
    """torch dtype name without the prefix: "float32", "bfloat16", ..."""
    shape: list[int]
    nbytes: int


class WeightsHeader(_Wire, tag="weights"):
    """Announces weight version `version`; `tensors[i]` describes raw frame i+1."""

    schema_version: int
    version: int
    tensors: list[TensorMeta]
    published_at: float
    """Unix time the learner started publishing (for publish-to-serving latency)."""


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder(enc_hook=enc_hook)
_data_decoder: msgspec.msgpack.Decoder[DataFrame] = msgspec.msgpack.Decoder(DataFrame, dec_hook=dec_hook)
_control_decoder: msgspec.msgpack.Decoder[ControlMessage] = msgspec.msgpack.Decoder(
    ControlMessage, dec_hook=dec_hook
)
_weights_decoder = msgspec.msgpack.Decoder(WeightsHeader)


def encode(msg: msgspec.Struct) -> bytes:
    """Encode any wire struct to MessagePack bytes."""
    return _encoder.encode(msg)


def encode_data_batch(encoded: list[bytes]) -> bytes:
    """A `DataBatch` frame from data messages already encoded with `encode` (copies each once)."""
    return _encoder.encode(_RawDataBatch([msgspec.Raw(b) for b in encoded]))


_T = TypeVar("_T")


def _decode(decoder: msgspec.msgpack.Decoder[_T], frame: bytes | memoryview) -> _T:
    try:
        return decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WireError(str(e)) from None
    except (TypeError, ValueError, OverflowError, RecursionError) as e:  # defensive: never crash
        raise WireError(f"{type(e).__name__}: {e}") from None


def decode_data(frame: bytes | memoryview) -> DataFrame:
    """Decode a data-plane frame or raise `WireError`."""
    return _decode(_data_decoder, frame)


def unpack_data(frames: Sequence[bytes | memoryview]) -> Sequence[DataMessage]:
    """The data messages of one received data-plane message, in order, or `WireError`.

    A data message is exactly one frame: a plain message or a non-empty `DataBatch`. Decoded
    values own their memory (strings, bytes and packed arrays are copies), so `frames` may be
    views into buffers that are reused after this returns.
    """
    if len(frames) != 1:
        raise WireError(f"expected 1 frame, got {len(frames)}")
    msg = _decode(_data_decoder, frames[0])
    if isinstance(msg, DataBatch):
        if not msg.items:
            raise WireError("empty batch")
        return msg.items
    return (msg,)


def decode_control(frame: bytes | memoryview) -> ControlMessage:
    """Decode a control-plane frame or raise `WireError`."""
    return _decode(_control_decoder, frame)


def decode_weights_header(frame: bytes | memoryview) -> WeightsHeader:
    """Decode a weights header frame or raise `WireError` (also on a schema mismatch)."""
    header = _decode(_weights_decoder, frame)
    if header.schema_version != SCHEMA_VERSION:
        raise WireError(
            f"weights schema version {header.schema_version}, expected {SCHEMA_VERSION}"
        )
    return header


def check_hello(msg: Hello, learner_version: int = 0) -> HelloAck:
    """The server side of the connect-time schema check; `learner_version`: the server's."""
    if msg.schema_version != SCHEMA_VERSION:
        return HelloAck(
            ok=False,
            schema_version=SCHEMA_VERSION,
            reason=f"peer {msg.peer_id!r} speaks schema {msg.schema_version}, "
            f"this server speaks {SCHEMA_VERSION}",
        )
    return HelloAck(ok=True, schema_version=SCHEMA_VERSION, learner_version=learner_version)


def action_token_count(episode: Episode) -> int:
    """Number of action tokens in an episode (the unit of token-weighted staleness)."""
    return sum(len(s.action_ids) for s in episode.steps)

"""Hypothesis strategies for hostile frames (tests/unit/wire/test_hostile_frames.py).

The strategies build frames the way an attacker or a broken peer would: random bytes, valid
frames cut short or with flipped bytes, valid msgpack of the wrong shape, messages of the wrong
family, structurally valid records with hostile values (NaN, huge, negative), and multipart
messages of the wrong length.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
from hypothesis import strategies as st

from agent_r1_async.wire import messages as m

# Cheap strategies on purpose: hypothesis' own overhead dominates a 10,000-case run, so values
# come from small pools of the interesting ones (bounds, signs, NaN, inf) plus raw draws.
_EDGE_INTS = [0, 1, 2, 3, -1, -2, 2**31, 2**63 - 1, -(2**63), 2**64 - 1]
_ints = st.sampled_from(_EDGE_INTS) | st.integers(-(2**63), 2**64 - 1)
_floats = st.sampled_from([0.0, -0.5, 1.0, math.nan, math.inf, -math.inf, 1e308, -0.0]) | (
    st.floats(allow_nan=True, allow_infinity=True)
)
_text = st.sampled_from(["", "e0", "g0", "a0", "x" * 40, "\u00e9\u6f22", "\x00"])
_small_list = st.lists(_ints, max_size=6)


# Composite strategies draw only from prebuilt strategies: building one inside a draw costs
# milliseconds (hypothesis labels it), which would dominate 10,000 cases.
_EPISODE_IDS = st.sampled_from(["e0", "e1", "e2", ""]) | _text
_GROUP_IDS = st.sampled_from(["g0", "g1"]) | _text
_SMALL_INDEX = st.integers(-2, 4) | _ints
_IDS_OF_LEN = [st.lists(_ints, min_size=n, max_size=n) for n in range(5)]
_FLOATS_OF_LEN = [st.lists(_floats, min_size=n, max_size=n) for n in range(5)]
_ANY_FLOATS = st.lists(_floats, max_size=6)
_TOKEN_VERSIONS = st.just([]) | st.lists(_ints, max_size=5)
_ACTORS = st.sampled_from(["a0", "evil"])
_STATUSES = st.sampled_from(["ok", "truncated", "timeout", "env_error"])
_METRICS = st.dictionaries(_text, _floats, max_size=3)
_GROUP_SIZES = st.integers(-1, 3) | _ints


@st.composite
def step_records(draw: Any) -> m.StepRecord:
    """A StepRecord with hostile values (decodes fine; the buffer must judge it)."""
    n = draw(st.integers(0, 4))
    return m.StepRecord(
        episode_id=draw(_EPISODE_IDS),
        group_id=draw(_GROUP_IDS),
        task_id=draw(_text),
        actor_id=draw(_ACTORS),
        env_name="fake",
        step_index=draw(_SMALL_INDEX),
        context_ids=draw(_small_list),
        action_ids=draw(_IDS_OF_LEN[n]),
        behavior_logprobs=draw(_FLOATS_OF_LEN[n] if draw(st.booleans()) else _ANY_FLOATS),
        policy_version=draw(_ints),
        process_reward=draw(_floats),
        done=draw(st.booleans()),
        token_versions=draw(_TOKEN_VERSIONS),
    )


@st.composite
def episode_ends(draw: Any) -> m.EpisodeEnd:
    return m.EpisodeEnd(
        episode_id=draw(_EPISODE_IDS),
        group_id=draw(_GROUP_IDS),
        task_id=draw(_text),
        actor_id="evil",
        env_name="fake",
        num_steps=draw(_SMALL_INDEX),
        outcome_reward=draw(_floats),
        status=draw(_STATUSES),
        group_size=draw(_GROUP_SIZES),
        metrics=draw(_METRICS),
    )


def _make_control_messages() -> st.SearchStrategy[msgspec.Struct]:
    return st.one_of(
        st.builds(m.Hello, schema_version=_ints,
                  role=st.sampled_from(["actor", "learner", "monitor"]), peer_id=_text),
        st.builds(m.CreditRequest, actor_id=_text, max_groups=_ints),
        st.builds(m.SampleRequest, num_groups=_ints, learner_version=_ints, timeout_s=_floats,
                  failed_episodes=_ints),
        st.builds(m.VersionUpdate, version=st.integers(-3, 3)),
        st.just(m.StatsRequest()),
        # Reply types sent as requests (a confused or malicious peer):
        st.builds(m.HelloAck, ok=st.booleans(), schema_version=_ints),
        st.builds(m.VersionAck, version=_ints),
        st.builds(m.ErrorReply, reason=_text),
        st.builds(m.CreditGrant, actor_id=_text, groups=_ints, learner_version=_ints),
    )


def _make_weights_headers() -> st.SearchStrategy[m.WeightsHeader]:
    meta = st.builds(
        m.TensorMeta,
        name=st.sampled_from(["w", "b", "", "w"]),  # duplicates too
        dtype=st.sampled_from(["float32", "bfloat16", "int64", "bool", "Tensor", "nope", ""]),
        shape=st.lists(st.sampled_from([-1, 0, 1, 2, 3, 4, 2**40]), max_size=3),
        nbytes=st.sampled_from([-1, 0, 1, 4, 8, 12, 16, 24, 32, 48, 64, 2**62]),
    )
    return st.builds(
        m.WeightsHeader,
        schema_version=st.sampled_from([m.SCHEMA_VERSION, m.SCHEMA_VERSION + 1, 0, -1]) | _ints,
        version=st.integers(-5, 1000),  # honest weight senders in the tests use higher versions
        tensors=st.lists(meta, max_size=3),
        published_at=_floats,
    )


# Built once: hypothesis spends most of its time labelling freshly built strategies.
_CONTROL = _make_control_messages()
_HEADERS = _make_weights_headers()
_STEPS = step_records()
_ENDS = episode_ends()
_BATCHES = st.lists(_STEPS | _ENDS, max_size=3).map(m.DataBatch)  # empty ones too


def _control_messages() -> st.SearchStrategy[msgspec.Struct]:
    return _CONTROL


def _weights_headers() -> st.SearchStrategy[m.WeightsHeader]:
    return _HEADERS


_scalars = st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=8)
_msgpack_values = _scalars | st.lists(_scalars, max_size=5) | st.dictionaries(
    _text, _scalars | st.lists(_scalars, max_size=3), max_size=4
)


_MANGLES = st.tuples(
    st.sampled_from(["truncate", "flip", "extend"]),
    st.integers(0, 2**16),
    st.integers(1, 255),
    st.binary(min_size=1, max_size=8),
)


def _mangle(frame: bytes, how: tuple[str, int, int, bytes]) -> bytes:
    """A valid frame truncated, with one byte flipped, or extended."""
    kind, pos, xor, tail = how
    if kind == "truncate" and frame:
        return frame[: pos % len(frame)]
    if kind == "flip" and frame:
        i = pos % len(frame)
        return frame[:i] + bytes([frame[i] ^ xor]) + frame[i + 1 :]
    return frame + tail


def mangled(frames: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.tuples(frames, _MANGLES).map(lambda t: _mangle(*t))


def hostile_frames(valid: st.SearchStrategy[msgspec.Struct]) -> st.SearchStrategy[list[bytes]]:
    """One multipart message as a hostile peer might send it on a socket expecting `valid`."""
    one = st.one_of(
        st.binary(max_size=64),  # random bytes
        _msgpack_values.map(msgspec.msgpack.encode),  # valid msgpack, wrong shape
        valid.map(m.encode),  # the right family with hostile values
        mangled(valid.map(m.encode)),  # truncated / flipped / extended
        _control_messages().map(m.encode),  # control messages in the wrong place
        _STEPS.map(m.encode),
        _weights_headers().map(m.encode),
    )
    return st.one_of(
        one.map(lambda f: [f]),
        st.lists(one, min_size=0, max_size=3).filter(lambda fs: len(fs) != 1),  # wrong count
    )


def data_frames() -> st.SearchStrategy[list[bytes]]:
    return hostile_frames(st.one_of(_STEPS, _ENDS, _BATCHES))


def control_frames() -> st.SearchStrategy[list[bytes]]:
    return hostile_frames(_control_messages())


_FIRST_FRAME = st.sampled_from(["as_is", "as_is", "mangled", "garbage"])
_GARBAGE = st.binary(max_size=32)
_COUNT = st.integers(0, 2)


@st.composite
def weights_messages(draw: Any) -> list[bytes]:
    """A header (often hostile) followed by tensor frames that may or may not fit it."""
    header = draw(_HEADERS)
    first = draw(_FIRST_FRAME)
    frame0 = m.encode(header)
    if first == "mangled":
        frame0 = _mangle(frame0, draw(_MANGLES))
    elif first == "garbage":
        frame0 = draw(_GARBAGE)
    n = [len(header.tensors), len(header.tensors) + 1, 0][draw(_COUNT)]
    fit = draw(st.booleans())
    frames = []
    for i in range(n):  # tensor frames: often exactly nbytes long, so later checks are reached
        want = header.tensors[i].nbytes if i < len(header.tensors) else 4
        frames.append(bytes(want if fit and 0 <= want <= 64 else (i * 3) % 17))
    return [frame0, *frames]

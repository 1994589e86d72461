"""Wire schema: round trips, schema check, and hostile frames never crash a decoder."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_r1_async.wire import messages as m


def _step(**kw) -> m.StepRecord:
    base = dict(
        episode_id="e1", group_id="g1", task_id="t1", actor_id="a0", env_name="arith",
        step_index=0, context_ids=[1, 2, 3], action_ids=[4, 5], behavior_logprobs=[-0.5, -1.25],
        policy_version=3,
    )
    base.update(kw)
    return m.StepRecord(**base)


def test_step_record_round_trip_keeps_every_field():
    rec = _step(process_reward=0.25, done=True, finish_reason="length", token_versions=[3, 4],
                gen_time_s=0.5, env_time_s=0.125, num_tool_calls=2, created_at=12.5)
    out = m.decode_data(m.encode(rec))
    assert out == rec
    assert isinstance(out, m.StepRecord)


def test_array_like_encoding_is_positional():
    # array_like: the struct is a msgpack array [tag, field0, field1, ...] in field order.
    raw = msgspec.msgpack.decode(m.encode(_step()))
    assert raw[0] == "step" and raw[1] == "e1" and raw[6] == 0 and raw[7] == [1, 2, 3]
    packed = msgspec.msgpack.decode(m.encode(_step(context_ids=m.TokenIds([1, 2, 3]))))
    assert packed[7] == b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00"


def test_packed_fields_travel_as_bin_of_4_and_8_bytes_per_value():
    rec = _step(context_ids=m.TokenIds([1, 2, 70000]), action_ids=m.TokenIds([2**31 - 1]),
                behavior_logprobs=m.LogProbs([-0.1]))
    raw = msgspec.msgpack.decode(m.encode(rec))
    assert raw[7] == (1).to_bytes(4, "little") + (2).to_bytes(4, "little") + (70000).to_bytes(4, "little")
    assert raw[8] == (2**31 - 1).to_bytes(4, "little")
    assert len(raw[9]) == 8
    out = m.decode_data(m.encode(rec))
    assert type(out.context_ids) is m.TokenIds and type(out.behavior_logprobs) is m.LogProbs
    assert out.context_ids == [1, 2, 70000] and out.action_ids == [2**31 - 1]
    assert out.behavior_logprobs == [-0.1]  # float64: bit-exact with the Python float


def test_packed_fields_decode_from_plain_lists_and_compare_by_value():
    out = m.decode_data(m.encode(_step()))  # built with lists: msgpack arrays on the wire
    assert type(out.context_ids) is m.TokenIds and out.context_ids == [1, 2, 3]
    assert out.context_ids != [1, 2] and out.context_ids != [1, 2, 4]
    assert out.behavior_logprobs == (-0.5, -1.25)
    assert list(out.action_ids) == [4, 5] and out.action_ids.tolist() == [4, 5]
    assert out == _step()  # struct equality goes field by field


@pytest.mark.parametrize("field,value", [
    (7, b"\x01\x00\x00"),           # 3 bytes: not a whole int32
    (9, b"\x00" * 12),                # 12 bytes: not a whole float64
    (7, [1, 2**31]),                  # beyond int32
    (7, [1, 2.5]),                    # a float token id
    (8, "abc"),                       # a string
    (9, [-0.5, "x"]),
])
def test_malformed_packed_fields_are_wire_errors(field, value):
    raw = msgspec.msgpack.decode(m.encode(_step()))
    raw[field] = value
    with pytest.raises(m.WireError):
        m.decode_data(msgspec.msgpack.encode(raw))


def test_packed_arrays_pickle_and_concatenate():
    import pickle

    ids = m.TokenIds([5, 6])
    back = pickle.loads(pickle.dumps(ids))
    assert type(back) is m.TokenIds and back == [5, 6]
    assert list(ids + m.TokenIds([7])) == [5, 6, 7]


def test_episode_end_and_stats_round_trip():
    end = m.EpisodeEnd(episode_id="e1", group_id="g1", task_id="t1", actor_id="a0",
                       env_name="arith", num_steps=2, outcome_reward=1.0, status="ok",
                       group_size=4, metrics={"em": 1.0, "f1": 1.0})
    stats = m.ActorStats(actor_id="a0", time=1.0, policy_version=2, tokens_per_s=95.5,
                         episodes_per_s=0.5, gen_time_s=3.0, env_time_s=0.25,
                         episodes_in_flight=8, episodes_done=10, episodes_failed=1)
    assert m.decode_data(m.encode(end)) == end
    assert m.decode_data(m.encode(stats)) == stats


def test_control_messages_round_trip():
    group = m.Group(group_id="g1", task_id="t1", env_name="arith", episodes=[
        m.Episode(steps=[_step(done=True)], end=m.EpisodeEnd(
            episode_id="e1", group_id="g1", task_id="t1", actor_id="a0", env_name="arith",
            num_steps=1, outcome_reward=0.0, status="truncated", group_size=1))])
    for msg in [
        m.Hello(schema_version=m.SCHEMA_VERSION, role="actor", peer_id="a0"),
        m.CreditRequest(actor_id="a0", max_groups=2),
        m.CreditGrant(actor_id="a0", groups=1, learner_version=5, reason="staleness"),
        m.SampleRequest(num_groups=4, learner_version=5, timeout_s=1.5),
        m.SampleRequest(num_groups=4, learner_version=5, timeout_s=1.5, failed_episodes=2),
        m.SampleBatch(groups=[group], is_weights=[0.5], learner_version=5),
        m.SampleBatch(groups=[group], is_weights=[0.5], learner_version=5,
                      failed=group.episodes),
        m.VersionUpdate(version=6),
        m.StatsRequest(),
        m.ErrorReply(reason="x"),
    ]:
        assert m.decode_control(m.encode(msg)) == msg


def test_weights_header_schema_version_is_checked():
    header = m.WeightsHeader(schema_version=m.SCHEMA_VERSION, version=7, published_at=1.0,
                             tensors=[m.TensorMeta(name="w", dtype="float32", shape=[2, 3],
                                                   nbytes=24)])
    assert m.decode_weights_header(m.encode(header)) == header
    old = msgspec.structs.replace(header, schema_version=m.SCHEMA_VERSION + 1)
    with pytest.raises(m.WireError, match="schema version"):
        m.decode_weights_header(m.encode(old))


def test_hello_with_other_schema_is_refused():
    ok = m.check_hello(m.Hello(schema_version=m.SCHEMA_VERSION, role="actor", peer_id="a"))
    bad = m.check_hello(m.Hello(schema_version=m.SCHEMA_VERSION + 1, role="actor", peer_id="a"))
    assert ok.ok and not bad.ok
    assert "speaks schema" in bad.reason


def test_data_decoder_rejects_control_message_and_wrong_types():
    with pytest.raises(m.WireError):
        m.decode_data(m.encode(m.VersionUpdate(version=1)))
    wrong = msgspec.msgpack.encode(["step", "e1", "g1", "t1", "a0", "x", "zero", [], [], [], 0])
    with pytest.raises(m.WireError, match="Expected `int`"):
        m.decode_data(wrong)


def test_action_token_count():
    ep = m.Episode(steps=[_step(), _step(step_index=1, action_ids=[7, 8, 9],
                                        behavior_logprobs=[0.0] * 3)],
                   end=m.EpisodeEnd(episode_id="e1", group_id="g1", task_id="t1", actor_id="a",
                                    env_name="x", num_steps=2, outcome_reward=0.0, status="ok",
                                    group_size=1))
    assert m.action_token_count(ep) == 5


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_wire_error(frame: bytes):
    for decode in (m.decode_data, m.decode_control, m.decode_weights_header):
        with contextlib.suppress(m.WireError):
            decode(frame)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=20,
)


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(["step", "episode_end", "actor_stats", "hello", "sample_request",
                        "credit_request", "weights"]), st.lists(_json_like, max_size=14))
def test_wrong_typed_frames_raise_only_wire_error(tag: str, fields: list):
    frame = msgspec.msgpack.encode([tag, *fields])
    for decode in (m.decode_data, m.decode_control, m.decode_weights_header):
        with contextlib.suppress(m.WireError):
            decode(frame)

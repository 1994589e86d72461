"""Delta step records: the actor sends appended tokens, the buffer checks the reference, the
learner rebuilds every context token for token."""

from __future__ import annotations

import asyncio
import zlib

import msgspec
import pytest

from agent_r1_async.actors.context import FullContext, make_context_builder
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.buffers.assembly import Assembler
from agent_r1_async.buffers.validate import RecordBounds, check_step
from agent_r1_async.config import ContextConfig
from agent_r1_async.envs.base import Task
from agent_r1_async.learner.batching import build_rows, chain_steps
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.wire.delta import (
    NO_CRC,
    WHOLE,
    DeltaEncoder,
    context_length,
    reference_problem,
    resolve_contexts,
)
from agent_r1_async.wire.messages import (
    Episode,
    EpisodeEnd,
    Group,
    StepRecord,
    TokenIds,
    decode_data,
    encode,
)
from tests.fakes.clock import FakeClock
from tests.fakes.engine import FakeEngine
from tests.fakes.envs import ScriptedEnv
from tests.fakes.records import end, step

TASK = Task("t1", "What is 2+2?", answer="4")


def _delta(episode: str, index: int, ids: list[int], length: int, n_actions: int = 3) -> StepRecord:
    rec = step(episode, "g", index, context_ids=ids, n_actions=n_actions)
    rec.context_from, rec.context_len = index - 1, length
    return rec


# --------------------------------------------------------------------------------------
# The encoder and the rebuild
# --------------------------------------------------------------------------------------


def test_the_encoder_sends_appended_tokens_and_a_new_segment_after_a_rebuilt_context() -> None:
    enc = DeltaEncoder()
    # step 0: whole; step 1 extends [1, 2] + action [9] by [3, 4]; step 2 extends step 1 +
    # action [8] by [5]; step 3's context drops a token (a window slid): whole again; step 4
    # extends step 3 + action [6] by nothing.
    assert enc.encode(0, [1, 2], [9])[:3] == ([1, 2], WHOLE, 0)
    assert enc.encode(1, [1, 2, 9, 3, 4], [8])[:3] == ([3, 4], 0, 5)
    assert enc.encode(2, [1, 2, 9, 3, 4, 8, 5], [7])[:3] == ([5], 1, 7)
    assert enc.encode(3, [2, 9, 3, 4, 8, 5, 7, 1], [6])[:3] == ([2, 9, 3, 4, 8, 5, 7, 1],
                                                                WHOLE, 0)
    assert enc.encode(4, [2, 9, 3, 4, 8, 5, 7, 1, 6], [6])[:3] == ([], 3, 9)
    # a context that keeps the previous context but not its action is whole
    assert enc.encode(5, [2, 9, 3, 4, 8, 5, 7, 1, 6, 0], [1])[:3] == (
        [2, 9, 3, 4, 8, 5, 7, 1, 6, 0], WHOLE, 0)
    off = DeltaEncoder(enabled=False)
    off.encode(0, [1], [2])
    assert off.encode(1, [1, 2, 3], [4])[:3] == ([1, 2, 3], WHOLE, 0)


def test_resolve_rebuilds_every_context_and_refuses_a_delta_without_its_reference() -> None:
    contexts = [[1, 2], [1, 2, 9, 9, 3], [1, 2, 9, 9, 3, 9, 9, 4, 4], [7], [7, 9, 9, 8]]
    enc = DeltaEncoder()
    recs = []
    for i, ctx in enumerate(contexts):
        ids, origin, length, crc = enc.encode(i, ctx, [9, 9])
        assert crc == zlib.crc32(TokenIds(ctx))  # of the whole context, delta or not
        rec = step("e", "g", i, context_ids=ids, action_ids=[9, 9])
        rec.context_from, rec.context_len, rec.context_crc = origin, length, crc
        recs.append(decode_data(encode(rec)))  # through the wire
    assert [r.context_from for r in recs] == [WHOLE, 0, 1, WHOLE, 3]
    assert [context_length(r) for r in recs] == [len(c) for c in contexts]
    assert resolve_contexts(recs) == contexts
    with pytest.raises(ValueError, match="missing_reference: step 2 extends step 1"):
        resolve_contexts([recs[0], recs[2]])
    assert reference_problem(recs[2], recs[1]) == ("", "")
    assert reference_problem(recs[2], recs[0])[0] == "bad_delta"  # 2 + 2 + 2 != 9
    # A delta with its lengths right but a token changed: its CRC no longer chains.
    bad = msgspec.structs.replace(recs[2], context_ids=TokenIds([4, 5]))
    assert reference_problem(bad, recs[1]) == (
        "bad_delta", "step 2: context_crc does not follow from step 1's context + action + "
        "the delta")
    with pytest.raises(ValueError, match="bad_delta"):
        resolve_contexts([recs[0], recs[1], bad])
    # Past a step without a CRC nothing chains; the rebuilt context is still checked.
    blind = [msgspec.structs.replace(recs[0], context_ids=TokenIds([1, 3]), context_crc=NO_CRC),
             recs[1]]
    assert reference_problem(recs[1], blind[0]) == ("", "")
    with pytest.raises(ValueError, match="context_mismatch: step 1's rebuilt context "
                                         r"\(5 tokens\) is not the one the actor sent"):
        resolve_contexts(blind)
    # Without any CRC (an older sender), nothing is checked.
    none = [msgspec.structs.replace(r, context_crc=NO_CRC) for r in recs]
    assert resolve_contexts(none) == contexts


def test_a_whole_records_crc_is_checked_at_ingest() -> None:
    bounds = RecordBounds(max_model_len=20)
    whole = step("e", "g", 0, context_ids=[1, 2, 3])
    whole.context_crc = zlib.crc32(TokenIds([1, 2, 3]))
    assert check_step(whole, bounds, 1) == ("", "")
    whole.context_crc = zlib.crc32(TokenIds([1, 2, 4]))
    assert check_step(whole, bounds, 1) == (
        "delta", "step 'e'/0: context_crc is not the CRC-32 of the whole context it carries")
    whole.context_crc = 1 << 32
    assert check_step(whole, bounds, 1)[0] == "delta"


def test_a_rollout_with_deltas_rebuilds_to_the_records_it_sends_without_them() -> None:
    tok = load_tokenizer(tiny_model_dir())
    eos = tok.eos_token_id
    action = [*tok.encode("hello", add_special_tokens=False), eos]

    def run(delta: bool, builder) -> list[StepRecord]:
        sent: list = []

        async def emit(msg) -> None:
            sent.append(decode_data(encode(msg)))

        rollout = Rollout(engine=FakeEngine.repeating(action), tokenizer=tok, builder=builder,
                          env_name="scripted", actor_id="a0", max_model_len=4096, max_turns=6,
                          step_timeout_s=5.0, delta_records=delta)
        asyncio.run(rollout.run(ScriptedEnv(turns=6), TASK, EpisodeIds("e", "g", 1), emit))
        return [m for m in sent if isinstance(m, StepRecord)]

    whole = run(False, FullContext())
    delta = run(True, FullContext())
    assert len(whole) == len(delta) == 6
    assert [r.context_from for r in delta] == [WHOLE, 0, 1, 2, 3, 4]
    assert resolve_contexts(delta) == [list(r.context_ids) for r in whole]
    assert [r.context_crc for r in delta] == [r.context_crc for r in whole] == [
        zlib.crc32(r.context_ids) for r in whole]
    # Each context token crosses the wire once: the deltas add up to the last context.
    sent_ids = sum(len(r.context_ids) for r in delta)
    assert sent_ids == len(whole[-1].context_ids) - 5 * len(action)
    # last_k = 2: from step 3 on the oldest turn leaves the context, so each step is whole.
    cfg = ContextConfig(builder="last_k", last_k=2)
    windowed = run(True, make_context_builder(cfg, tok))
    assert [r.context_from for r in windowed] == [WHOLE, 0, 1, WHOLE, WHOLE, WHOLE]
    assert resolve_contexts(windowed) == [list(r.context_ids) for r in
                                          run(False, make_context_builder(cfg, tok))]


# --------------------------------------------------------------------------------------
# The buffer: form at ingest, reference at assembly
# --------------------------------------------------------------------------------------


def test_ingest_checks_a_deltas_form_and_its_declared_length() -> None:
    bounds = RecordBounds(max_model_len=20)
    ok = _delta("e", 1, [5, 6], 17)
    assert check_step(ok, bounds, 1) == ("", "")
    assert check_step(_delta("e", 1, [5, 6], 18), bounds, 1)[0] == "too_long"  # 18 + 3 > 20
    bad_from = _delta("e", 2, [5], 10)
    bad_from.context_from = 0
    assert check_step(bad_from, bounds, 1) == (
        "delta", "step 'e'/2: context_from 0 at step_index 2")
    assert check_step(_delta("e", 0, [5], 10), bounds, 1)[0] == "delta"  # step 0 extends none
    assert check_step(_delta("e", 1, [5, 6], 2), bounds, 1)[0] == "delta"  # no room for a base
    whole = step("e", "g", 0, context_ids=[1, 2, 3])
    whole.context_len = 4
    assert check_step(whole, bounds, 1)[0] == "delta"


def test_assembly_keeps_deltas_as_they_came_and_fails_an_episode_whose_reference_is_missing() -> None:
    asm, clock = Assembler(120.0, 2, 600.0, 5.0), FakeClock()
    # e0: whole step 0 (4 tokens + 3 actions), deltas of 2 and 1 tokens: contexts 4, 9, 13.
    e0 = [step("e0", "g", 0), _delta("e0", 1, [6, 6], 9), _delta("e0", 2, [7], 13)]
    # e1: its step 1 never arrives (lost): step 2 fails the episode.
    e1 = [step("e1", "g", 0), _delta("e1", 2, [7], 13)]
    # e2: step 1's declared length is wrong (4 + 3 + 2 = 9, not 10).
    e2 = [step("e2", "g", 0), _delta("e2", 1, [6, 6], 10)]
    # e3: reordered, step 1 before step 0.
    e3 = [_delta("e3", 1, [6, 6], 9), step("e3", "g", 0)]
    for r in [*e0, end("e0", "g", 3, group_size=5), *e1, *e2, *e3]:
        asm.add(r, clock())
    assert asm.drops == {"missing_reference": 2, "bad_delta": 1, "late_record": 1}
    for r in [step("e4", "g", 0), _delta("e4", 1, [6, 6], 9), end("e4", "g", 2, group_size=5),
              end("e1", "g", 3, group_size=5)]:
        asm.add(r, clock())
    ready, _ = asm.drain()
    (group,) = [r.group for r in ready]
    assert [e.end.episode_id for e in group.episodes] == ["e0", "e4"]
    kept = group.episodes[0].steps
    assert [list(s.context_ids) for s in kept] == [[1, 2, 3, 4], [6, 6], [7]]  # stored as deltas
    assert resolve_contexts(kept) == [[1, 2, 3, 4], [1, 2, 3, 4, 5, 5, 5, 6, 6],
                                      [1, 2, 3, 4, 5, 5, 5, 6, 6, 5, 5, 5, 7]]


def test_the_learner_packs_a_delta_episode_exactly_as_the_whole_one() -> None:
    contexts = [[1, 2, 3, 4], [1, 2, 3, 4, 5, 5, 5, 6, 6], [1, 2, 3, 4, 5, 5, 5, 6, 6, 5, 5, 5, 7]]
    whole = [step("e", "g", i, context_ids=c) for i, c in enumerate(contexts)]
    delta = [step("e", "g", 0), _delta("e", 1, [6, 6], 9), _delta("e", 2, [7], 13)]
    ep_end: EpisodeEnd = end("e", "g", 3)

    def rows(steps: list[StepRecord]):
        group = Group("g", "task-g", "fake", [Episode(steps=steps, end=ep_end)])
        return build_rows([(group, 1.0)], [[[0.1, 0.2, 0.3]]], [[[0.0, 0.0, 1.0]]])

    a, b = rows(whole), rows(delta)
    assert [list(r.context_ids) for r in b] == contexts
    assert [(r.advantage, list(r.action_ids)) for r in a] == [(r.advantage, list(r.action_ids))
                                                              for r in b]
    assert chain_steps(a) == chain_steps(b) == [[0, 1, 2]]
    assert [r.extends for r in b] == [False, True, True]

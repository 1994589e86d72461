"""Every numeric field is range-checked at ingest against the run's own bounds, each
refusal is counted by reason, a refused group never holds its credit, and `ActorStats` are
bounded in number and sanity. Buffer logic only, with a fake clock (no sockets). The bounds
are a `RecordBounds` derived at launch from the run's config, never user keys."""

from __future__ import annotations

import dataclasses
import math

import msgspec
import pytest

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.validate import RecordBounds
from agent_r1_async.config import AlgorithmConfig, BufferConfig, config_from_dict
from agent_r1_async.wire.messages import ActorStats, EpisodeEnd, StepRecord, TokenIds
from tests.fakes.clock import FakeClock
from tests.fakes.records import end, group_records, step

# The run's bounds: vocabulary 1000, max_model_len 512, env.max_turns 4, group_size 2.
BOUNDS = RecordBounds(vocab_size=1000, max_model_len=512, max_steps=4, max_group_size=2)


def _buffer(
    bounds: RecordBounds | None = BOUNDS, **kw: object
) -> tuple[EpisodeBuffer, FakeClock]:
    clock = FakeClock()
    cfg = BufferConfig(**{"spi_tolerance": 100.0, **kw})  # type: ignore[arg-type]
    algo = AlgorithmConfig(group_size=2, batch_groups=1)
    return EpisodeBuffer(cfg, algo, clock, bounds=bounds), clock


def _step(**changes: object) -> StepRecord:
    return msgspec.structs.replace(step("e0", "g", 0), **changes)


def _end(**changes: object) -> EpisodeEnd:
    return msgspec.structs.replace(end("e0", "g", 1), **changes)


REFUSED = {
    # the values first
    "3,000-token context, max_model_len 512": (_step(context_ids=[1] * 3000), "too_long"),
    "empty action_ids": (_step(action_ids=[], behavior_logprobs=[]), "empty_action"),
    "policy_version 2^62": (_step(policy_version=2**62), "version"),
    "token_versions 2^64-1": (_step(token_versions=[0, 0, 2**64 - 1]), "token_versions"),
    "step_index 2^62": (_step(step_index=2**62), "step_index"),
    "log-probs +1e308": (_step(behavior_logprobs=[1e308] * 3), "logprob"),
    "log-probs -1e308": (_step(behavior_logprobs=[-1e308] * 3), "logprob"),
    "outcome 1e200": (_end(outcome_reward=1e200), "reward"),
    "outcome -1e200": (_end(outcome_reward=-1e200), "reward"),
    # one past each bound
    "context 510 + 3 actions > 512": (_step(context_ids=[1] * 510), "too_long"),
    "step_index = env.max_turns": (_step(step_index=4), "step_index"),
    "negative step_index": (_step(step_index=-1), "step_index"),
    "policy_version learner + 2": (_step(policy_version=2), "version"),
    "negative policy_version": (_step(policy_version=-1), "version"),
    "negative token version": (_step(token_versions=[0, -1, 0]), "token_versions"),
    "a positive log-prob": (_step(behavior_logprobs=[-0.5, 0.01, -0.5]), "logprob"),
    "log-prob below -1e4": (_step(behavior_logprobs=[-0.5, -10_001.0, -0.5]), "logprob"),
    "NaN log-prob": (_step(behavior_logprobs=[math.nan] * 3), "logprob"),
    "process reward 1e6 + 1": (_step(process_reward=1e6 + 1), "reward"),
    "token id = vocab_size": (_step(action_ids=TokenIds([5, 1000, 7])), "token_id"),
    "2 log-probs for 3 actions": (_step(behavior_logprobs=[-0.5] * 2), "shape"),
    "gen_time_s inf": (_step(gen_time_s=math.inf), "timing"),
    "num_steps 2^62": (_end(num_steps=2**62), "num_steps"),
    "num_steps > env.max_turns": (_end(num_steps=5), "num_steps"),
    "group_size 2^62": (_end(group_size=2**62), "group_size"),
    "group_size 0": (_end(group_size=0), "group_size"),
    "outcome NaN": (_end(outcome_reward=math.nan), "reward"),
    "a metric 1e300": (_end(metrics={"em": 1e300}), "timing"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_each_out_of_range_field_is_refused_and_counted_by_reason(name: str) -> None:
    buf, _ = _buffer()
    record, reason = REFUSED[name]
    gid = buf.grant("a0", 1).group_ids[0]  # a granted group: the range checks come next
    buf.ingest(msgspec.structs.replace(record, group_id=gid))
    assert buf.drops["invalid_record"] == 1
    assert buf.drops[f"invalid_record/{reason}"] == 1, dict(buf.drops)
    assert buf.assembler.drops["rejected_episode"] == 1  # its episode can never be whole


def test_values_at_the_bounds_are_accepted() -> None:
    buf, _ = _buffer()
    gid = buf.grant("a0", 1).group_ids[0]
    # context 509 + 3 actions = 512 = max_model_len; last step index 3; version learner + 1;
    # rewards ±1e6; log-probs -1e4 and 0; ids 0 and vocab_size - 1.
    recs: list[StepRecord | EpisodeEnd] = []
    for j, reward in enumerate((1e6, -1e6)):
        eid = f"e{j}"
        recs += [msgspec.structs.replace(
            step(eid, gid, i, version=1), context_ids=TokenIds([0] * 508 + [999]),
            behavior_logprobs=[-1e4, 0.0, -0.5], token_versions=[0, 1, 1],
            process_reward=-1e6) for i in range(4)]
        recs.append(end(eid, gid, 4, reward=reward))
    for r in recs:
        buf.ingest(r)
    assert buf.drops["invalid_record"] == 0, dict(buf.drops)
    assert [e.group.group_id for e in buf.store.entries()] == [gid]


@pytest.mark.parametrize("outcome", [math.nan, 1e200])
def test_a_complete_group_whose_outcomes_are_refused_releases_its_credit(
        outcome: float) -> None:
    """The steps of a granted group arrive, both its EpisodeEnds are refused: the credit is
    released at once, not held until episode_timeout_s (600 s), which would stall admission."""
    buf, _ = _buffer(max_staleness=0)  # budget (0 + 0 + 1) × 1 = 1 group
    grant = buf.grant("a0", 1)
    assert grant.groups == 1 and buf.grant("a0", 1).groups == 0
    gid = grant.group_ids[0]
    for r in group_records(gid, [outcome, -outcome]):
        buf.ingest(r)
    assert buf.drops["invalid_record/reward"] == 2
    assert buf.assembler.drops["rejected_episode"] == 2
    assert buf.assembler.drops["group_too_small"] == 1 and len(buf.store) == 0
    assert buf.admission.in_flight == 0 and buf.admission.accepted == 0
    assert buf.grant("a0", 1).groups == 1  # at once: no clock advance


def test_a_refused_step_drops_its_episode_and_the_group_still_completes() -> None:
    """The rest of the group goes on: one refused step ends only its own episode."""
    buf, _ = _buffer(min_group_episodes=1)
    gid = buf.grant("a0", 1).group_ids[0]
    recs = group_records(gid, [0.0, 1.0])  # e0: steps 0, 1, end; e1: steps 0, 1, end
    recs[1] = msgspec.structs.replace(recs[1], context_ids=[1] * 3000)  # e0's step 1
    for r in recs:
        buf.ingest(r)
    assert buf.drops["invalid_record/too_long"] == 1
    assert buf.assembler.drops["rejected_episode"] == 1
    assert buf.assembler.drops["late_record"] == 1  # e0's end, after its episode was dropped
    [entry] = buf.store.entries()
    assert [ep.end.episode_id for ep in entry.group.episodes] == [f"{gid}-e1"]
    assert buf.admission.in_flight == 0 and buf.admission.accepted == 1


def _stats(actor_id: str, tokens_per_s: float = 100.0, **kw: object) -> ActorStats:
    return ActorStats(actor_id=actor_id, time=1.0, policy_version=0, tokens_per_s=tokens_per_s,
                      episodes_per_s=1.0, gen_time_s=1.0, env_time_s=1.0, episodes_in_flight=1,
                      episodes_done=1, episodes_failed=0, **kw)  # type: ignore[arg-type]


def test_actor_stats_are_bounded_in_number() -> None:
    buf, _ = _buffer(dataclasses.replace(BOUNDS, max_actors=4))
    for i in range(2000):
        buf.ingest(_stats(f"ghost-{i}"))
    assert sorted(buf.actor_stats) == [f"ghost-{i}" for i in range(4)]
    assert buf.drops["actor_stats_overflow"] == 1996
    buf.ingest(_stats("ghost-2", tokens_per_s=7.0))  # a kept id still updates
    assert buf.actor_stats["ghost-2"].tokens_per_s == 7.0
    assert len(buf.stats().actors) == 4
    unset, _ = _buffer(None)  # no bounds from a launch (max_actors 0): 256
    for i in range(300):
        unset.ingest(_stats(f"a{i}"))
    assert len(unset.actor_stats) == 256 and unset.drops["actor_stats_overflow"] == 44


@pytest.mark.parametrize(("changes", "reason"), [
    ({"tokens_per_s": 5e11}, "rate"),
    ({"tokens_per_s": math.nan}, "rate"),
    ({"tokens_per_s": -1.0}, "rate"),
    ({"policy_version": 2**62}, "version"),
    ({"weight_sync_latency_s": math.inf}, "timing"),
    ({"tokens_total": 2**63}, "count"),
])
def test_absurd_actor_stats_are_refused_and_counted(changes: dict, reason: str) -> None:
    buf, _ = _buffer(dataclasses.replace(BOUNDS, max_actors=4))
    buf.ingest(_stats("actor-0", tokens_per_s=120.0))
    buf.ingest(msgspec.structs.replace(_stats("actor-0"), **changes))
    assert buf.drops[f"invalid_stats/{reason}"] == 1
    assert buf.actor_stats["actor-0"].tokens_per_s == 120.0  # the sane report stays


def test_bounds_are_derived_from_the_run_config() -> None:
    """Each bound from its own key: model.max_model_len 512, env.max_turns 3,
    algorithm.group_size 6, actors.num_actors 5, and the vocabulary the launch read (777)."""
    run = config_from_dict({"model": {"max_model_len": 512}, "env": {"max_turns": 3},
                            "algorithm": {"group_size": 6}, "actors": {"num_actors": 5}})
    assert RecordBounds.from_config(run, vocab_size=777) == RecordBounds(
        vocab_size=777, max_model_len=512, max_steps=3, max_group_size=6, max_actors=5)
    # the defaults too: each field follows its own section's default
    default = config_from_dict({})
    assert RecordBounds.from_config(default, vocab_size=0) == RecordBounds(
        vocab_size=0, max_model_len=default.model.max_model_len,
        max_steps=default.env.max_turns, max_group_size=default.algorithm.group_size,
        max_actors=default.actors.num_actors)


def test_the_launch_reads_the_vocabulary_from_the_policy_config(tmp_path) -> None:
    """`record_bounds` (what SupervisedBuffer hands every BufferHost): config.json's
    vocab_size, and the rest from the run; a hub id not on disk leaves ids unchecked (0)."""
    import json

    from agent_r1_async.run.processes.buffer_group import record_bounds

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 777}))
    run = config_from_dict({"model": {"name_or_path": str(tmp_path), "max_model_len": 512},
                            "env": {"max_turns": 3}, "actors": {"num_actors": 5}})
    assert record_bounds(run) == RecordBounds.from_config(run, vocab_size=777)
    hub = msgspec.structs.replace(run, model=msgspec.structs.replace(
        run.model, name_or_path="some-org/not-downloaded"))
    assert record_bounds(hub).vocab_size == 0


def test_the_buffer_host_checks_records_against_the_bounds_it_is_given() -> None:
    """BufferHost (no Ray needed to build one) hands its `bounds` to the buffer as they are
    (their group size is the config's `algorithm.group_size`, the buffer's one bound)."""
    from agent_r1_async.run.processes.buffer_group import BufferHost

    cfg = config_from_dict({"buffer": {"gc_freeze": False, "snapshot_interval_s": 0.0},
                            "algorithm": {"group_size": BOUNDS.max_group_size}})
    host = BufferHost(cfg, BOUNDS, None, None, resume=False)
    try:
        assert host.service.buffer.bounds == BOUNDS
    finally:
        host.stop()


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match=r"RecordBounds\.max_steps must be >= 0"):
        RecordBounds(max_steps=-1)

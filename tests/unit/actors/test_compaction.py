"""`context.builder: compact`: the agent's summary as a trained step.

- Token-exact: the summary step's context, and every context after a summary, equal the chat
  template's rendering of the conversation the model is shown, token for token; the summary
  ids are exactly the sampled ones (kept even when not the canonical tokenization).
- The rollout records the summary as a step (its log-probs, versions, the next index, process
  reward 0, never sent to the env), the step after it starts a new segment, and the learner
  trains the summary tokens (action mask, nonzero advantages under step and token credit).
- Budgets: a `compact` budget that leaves no room is an error naming the key.
- Metrics: `context/compactions`, `context/summary_tokens`, `context/success_after_compaction`,
  counted by hand.
"""

from __future__ import annotations

import asyncio

import pytest

from agent_r1_async import returns as ret
from agent_r1_async.actors.context import CompactContext, History, make_context_builder
from agent_r1_async.actors.rollout import CONTEXT_METRICS, EpisodeIds, Rollout
from agent_r1_async.config import (
    SUMMARY_PROMPT,
    ConfigError,
    ContextConfig,
    config_from_dict,
)
from agent_r1_async.envs.base import StepResult, Task
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import batching
from agent_r1_async.wire.delta import WHOLE, resolve_contexts
from agent_r1_async.wire.messages import (
    MAX_METRICS,
    Episode,
    EpisodeEnd,
    Group,
    SampleBatch,
    StepRecord,
    decode_data,
    encode,
)
from tests.fakes.engine import FakeEngine
from tests.fakes.envs import ScriptedEnv
from tests.unit.actors.test_context import (
    A1,
    A2,
    A3,
    IM_END,
    INSTRUCTION,
    O1,
    O2,
    QWEN_LIKE,
    enc,
    reference,
)

TASK = Task("t1", "What is 2+2?", answer="4")
SUMMARY = "Asked 2+2; two searches done; answer next."


def asst(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def request() -> dict[str, str]:
    return {"role": "user", "content": SUMMARY_PROMPT}


def two_turns(tok) -> History:
    h = History(tok)
    h.add_messages(INSTRUCTION)
    h.add_action([*enc(tok, A1), IM_END])
    h.add_messages(O1)
    h.add_action([*enc(tok, A2), IM_END])
    h.add_messages(O2)
    return h


def compact(max_tokens: int, summary_max_tokens: int = 64) -> CompactContext:
    return CompactContext(max_tokens, SUMMARY_PROMPT, summary_max_tokens)


# --------------------------------------------------------------------------------------
# The builder: token-exact layouts
# --------------------------------------------------------------------------------------


def test_compact_is_full_until_the_budget_then_asks_for_a_summary(tok):
    h = two_turns(tok)
    whole = reference(tok, [*INSTRUCTION, asst(A1), *O1, asst(A2), *O2])
    assert compact(len(whole)).build(h) == whole and not compact(len(whole)).due(h)
    b = compact(len(whole) - 1)
    assert b.build(h) == whole and b.due(h)  # one token over the budget: a summary is due
    # The summary step's context: the history, the request as a user turn, the prompt.
    assert b.summary_context(h) == reference(
        tok, [*INSTRUCTION, asst(A1), *O1, asst(A2), *O2, request()])
    made = make_context_builder(
        ContextConfig(builder="compact", max_tokens=99, summary_max_tokens=40), tok)
    assert isinstance(made, CompactContext)
    assert (made.max_tokens, made.summary_max_tokens, made.summary_prompt) == (
        99, 40, SUMMARY_PROMPT)


def test_after_a_summary_the_context_is_instruction_summary_last_answer_turns_since(tok):
    h = two_turns(tok)
    b = compact(60 + len(reference(tok, [*INSTRUCTION, asst(SUMMARY), *O2])))
    summary_ids = [*enc(tok, SUMMARY), IM_END]
    b.add_summary(h, summary_ids)
    assert h.summaries[0].at == 2 and h.turns_since_summary() == 0 and not b.due(h)
    # The env's last answer (O2) is kept after the summary: it is what the next action answers.
    assert b.build(h) == reference(tok, [*INSTRUCTION, asst(SUMMARY), *O2])
    h.add_action([*enc(tok, A3), IM_END])
    o3 = [{"role": "user", "content": "<tool_response>\nnothing\n</tool_response>"}]
    h.add_messages(o3)
    shown = [*INSTRUCTION, asst(SUMMARY), *O2, asst(A3), *o3]
    assert b.build(h) == reference(tok, shown)
    # The whole episode in order: the request and the summary after the turns they fold.
    assert h.full_ids() == reference(
        tok, [*INSTRUCTION, asst(A1), *O1, asst(A2), *O2, request(), asst(SUMMARY), asst(A3), *o3],
        gen=False)
    # A second summary folds the first (it was written seeing it) and the turns since.
    b.max_tokens = len(reference(tok, shown)) - 1
    assert b.due(h)
    assert b.summary_context(h) == reference(tok, [*shown, request()])
    b.max_tokens = 10_000
    b.add_summary(h, [*enc(tok, "Second."), IM_END])
    assert b.build(h) == reference(tok, [*INSTRUCTION, asst("Second."), *o3])


def test_the_last_answer_is_dropped_when_it_would_not_fit(tok):
    h = two_turns(tok)
    b = compact(len(reference(tok, [*INSTRUCTION, asst(SUMMARY), *O2])) - 1)
    b.add_summary(h, [*enc(tok, SUMMARY), IM_END])
    assert b.build(h) == reference(tok, [*INSTRUCTION, asst(SUMMARY)])


def test_summary_ids_are_kept_exactly_as_sampled(tok):
    h = two_turns(tok)
    b = compact(10_000)
    odd = [t for ch in "Asked 2+2." for t in enc(tok, ch)]  # one token per character
    assert odd != enc(tok, "Asked 2+2.")
    b.add_summary(h, odd)  # stopped at the length limit: no <|im_end|> sampled
    ctx = b.build(h)
    start = len(h.instruction_ids) + len(h.generation_prompt)
    assert ctx[start:start + len(odd)] == odd
    assert ctx[start + len(odd)] == IM_END  # the context closes the turn the summary left open


def test_qwen_style_tool_answers_render_the_same(tok):
    import copy

    qtok = copy.deepcopy(tok)
    qtok.chat_template = QWEN_LIKE
    tool_answer = [{"role": "tool", "content": "(1) Ostrum."}, {"role": "tool", "content": "(2) Kell."}]
    h = History(qtok)
    h.add_messages(INSTRUCTION)
    h.add_action([*enc(qtok, A1), IM_END])
    h.add_messages(tool_answer)
    b = compact(10_000)
    assert b.summary_context(h) == reference(qtok, [*INSTRUCTION, asst(A1), *tool_answer, request()])
    b.add_summary(h, [*enc(qtok, SUMMARY), IM_END])
    assert b.build(h) == reference(qtok, [*INSTRUCTION, asst(SUMMARY), *tool_answer])


# --------------------------------------------------------------------------------------
# The rollout: the summary is a recorded step
# --------------------------------------------------------------------------------------

ACTION = "hello"
ACTION_LOGPROB = -0.5


def summary_engine(tok) -> FakeEngine:
    """Answers the summary request with SUMMARY, anything else with ACTION (each + eos)."""
    asks = SUMMARY_PROMPT + "<|im_end|>\n<|im_start|>assistant\n"

    def reply(ctx: list[int], _n: int) -> list[int]:
        text = SUMMARY if tok.decode(ctx).endswith(asks) else ACTION
        return [*enc(tok, text), IM_END]

    return FakeEngine(reply, logprob=ACTION_LOGPROB)


# With ScriptedEnv and the SmolLM2 tokenizer: the instruction is 33 tokens, the generation
# prompt 4, a turn 15 (the prompt, "hello" + eos, "\n", "obs i" as a tool turn), the summary
# 15 with its eos, the compaction request 63.
INSTR, GP, TURN, SUMMARY_LEN, REQUEST = 33, 4, 15, 15, 63


def run(tok, env: ScriptedEnv, max_turns: int = 20, max_tokens: int = 85, delta: bool = True,
        engine: FakeEngine | None = None) -> tuple[EpisodeEnd, list[StepRecord], FakeEngine]:
    engine = engine or summary_engine(tok)
    rollout = Rollout(engine=engine, tokenizer=tok, builder=compact(max_tokens, 32),
                      env_name="scripted", actor_id="a0", max_model_len=512,
                      max_turns=max_turns, step_timeout_s=5.0, delta_records=delta)
    sent: list = []

    async def emit(msg) -> None:
        sent.append(decode_data(encode(msg)))  # what crosses the wire

    end = asyncio.run(rollout.run(env, TASK, EpisodeIds("e", "g", 2), emit))
    assert sent[-1] == end
    return end, [m for m in sent if isinstance(m, StepRecord)], engine


def test_the_summary_is_a_step_recorded_and_never_sent_to_the_env(tok):
    env = ScriptedEnv(turns=8)
    end, steps, engine = run(tok, env)
    summary_ids = [*enc(tok, SUMMARY), IM_END]
    action_ids = [*enc(tok, ACTION), IM_END]
    # By hand: contexts 37, 52, 67, 82 (actions 0-3); the 5th would be 97 > 85: a summary (step
    # 4). After it: 33 + (4 + 15 + 1 + 8) + 4 = 65, then 80; the next would be 95: a summary
    # (step 7); then 65, 80 and the env's 8th answer ends the episode.
    kinds = ["S" if s.action_ids == summary_ids else "A" for s in steps]
    assert "".join(kinds) == "AAAASAASAA"
    assert [s.step_index for s in steps] == list(range(10))
    assert env.actions == [ACTION] * 8  # the env saw every action and no summary
    contexts = resolve_contexts(steps)
    assert len(summary_ids) == SUMMARY_LEN and compact(1).request_len(tok) == REQUEST
    obs = TURN - GP - len(action_ids) - 1  # "obs i" as a tool turn
    after = INSTR + (GP + SUMMARY_LEN + 1 + obs) + GP  # summary turn, its kept answer, prompt
    assert [len(c) for c in contexts] == [37, 52, 67, 82, 97 + REQUEST, after, after + TURN,
                                          after + 2 * TURN + REQUEST, after, after + TURN]
    for i in (4, 7):
        s = steps[i]
        assert s.process_reward == 0.0 and not s.done and s.num_tool_calls == 0
        assert s.behavior_logprobs == [ACTION_LOGPROB] * len(summary_ids)
        assert s.policy_version == 0 and s.env_time_s == 0.0
        assert s.context_from == i - 1  # the summary step extends the step before it (a delta)
        assert steps[i + 1].context_from == WHOLE  # the step after it starts a new segment
    # The engine was asked for at most context.summary_max_tokens for the summaries only.
    assert [budget for _, budget in engine.calls] == [
        32 if k == "S" else None for k in kinds]
    # Token-exact against the chat template: the summary step, and the step after it.
    chat = [{"role": "user", "content": TASK.prompt}]
    for i in range(4):
        chat += [asst(ACTION), {"role": "tool", "content": f"obs {i}"}]
    assert contexts[4] == reference(tok, [*chat, request()])
    assert contexts[5] == reference(tok, [chat[0], asst(SUMMARY), chat[-1]])
    assert list(contexts[5][INSTR + GP:INSTR + GP + len(summary_ids)]) == summary_ids
    assert [s.done for s in steps] == [False] * 9 + [True]
    assert steps[-1].action_ids == action_ids and steps[-1].process_reward == pytest.approx(0.8)
    # Metrics by hand: 2 compactions of 15 tokens each, and the episode succeeded.
    assert end.status == "ok" and end.num_steps == 10 and end.outcome_reward == 1.0
    assert end.metrics == {"em": 1.0, "context/compactions": 2.0,
                           "context/summary_tokens": 15.0,
                           "context/success_after_compaction": 1.0}


def test_whole_records_carry_the_same_contexts(tok):
    _, deltas, _ = run(tok, ScriptedEnv(turns=8))
    _, whole, _ = run(tok, ScriptedEnv(turns=8), delta=False)
    assert all(s.context_from == WHOLE for s in whole)
    assert [list(c) for c in resolve_contexts(deltas)] == [list(s.context_ids) for s in whole]


def test_summaries_count_toward_max_turns_and_none_takes_the_last_step(tok):
    # max_turns 5: steps 0-3 are actions; at step 4 a summary is due, but it would leave no
    # step for an action, so the 5th action comes instead (over the budget) and is cut there.
    end, steps, _ = run(tok, ScriptedEnv(never_done=True), max_turns=5)
    assert len(steps) == 5 and all(list(s.action_ids) == [*enc(tok, ACTION), IM_END] for s in steps)
    assert end.status == "truncated" and end.num_steps == 5 and steps[-1].done
    assert end.metrics == {"context/compactions": 0.0}
    # max_turns 6: the summary is step 4, the 5th action step 5, which is the last.
    end, steps, _ = run(tok, ScriptedEnv(never_done=True), max_turns=6)
    assert len(steps) == 6 and steps[4].action_ids == [*enc(tok, SUMMARY), IM_END]
    assert end.status == "truncated" and end.num_steps == 6 and steps[-1].done
    assert end.metrics == {"context/compactions": 1.0, "context/summary_tokens": 15.0,
                           "context/success_after_compaction": 0.0}


def test_summary_length_is_averaged_and_failures_are_no_success(tok):
    lengths = iter([5, 9])
    asks = SUMMARY_PROMPT + "<|im_end|>\n<|im_start|>assistant\n"

    def reply(ctx: list[int], _n: int) -> list[int]:
        if tok.decode(ctx).endswith(asks):
            return [*enc(tok, "x" * 40)[: next(lengths) - 1], IM_END]
        return [*enc(tok, ACTION), IM_END]

    end, steps, _ = run(tok, ScriptedEnv(turns=8, raise_on=7), engine=FakeEngine(reply))
    assert sum(1 for s in steps if s.process_reward == 0.0) == 2
    assert end.status == "env_error"
    assert end.metrics == {"context/compactions": 2.0, "context/summary_tokens": 7.0,
                           "context/success_after_compaction": 0.0}


def test_no_context_metrics_without_compact_and_room_reserved_for_them(tok):
    from agent_r1_async.actors.context import FullContext

    rollout = Rollout(engine=summary_engine(tok), tokenizer=tok, builder=FullContext(),
                      env_name="scripted", actor_id="a0", max_model_len=512, max_turns=4,
                      step_timeout_s=5.0)
    end = asyncio.run(rollout.run(ScriptedEnv(turns=2), TASK, EpisodeIds("e", "g", 1),
                                  _ignore))
    assert not any(k in end.metrics for k in CONTEXT_METRICS)

    class ManyMetrics(ScriptedEnv):
        async def step(self, action: str) -> StepResult:
            r = await super().step(action)
            r.metrics = {f"m{i}": 1.0 for i in range(MAX_METRICS - 1)}
            return r

    end, _, _ = run(tok, ManyMetrics(turns=2))
    assert end.status == "env_error"
    assert f"at most {MAX_METRICS - 3} are kept (3 more are the context builder's)" in end.error


async def _ignore(_msg) -> None:
    pass


# --------------------------------------------------------------------------------------
# The learner trains the summary tokens
# --------------------------------------------------------------------------------------


def _batch(tok) -> tuple[SampleBatch, list[int]]:
    """A group of two episodes of the same shape (A S A A S ... by hand above, 10 steps):
    one ends solved (outcome 1), one is cut at env.max_turns (outcome 0)."""
    episodes = []
    for env in (ScriptedEnv(turns=8), ScriptedEnv(never_done=True)):
        end, steps, _ = run(tok, env, max_turns=10)
        episodes.append(Episode(steps=steps, end=end))
    assert [e.end.status for e in episodes] == ["ok", "truncated"]
    summary_ids = [*enc(tok, SUMMARY), IM_END]
    summaries = [s.step_index for s in episodes[0].steps if s.action_ids == summary_ids]
    assert summaries == [4, 7]
    assert [s.step_index for s in episodes[1].steps if s.action_ids == summary_ids] == summaries
    return SampleBatch([Group("g", "t1", "scripted", episodes)], [1.0], 0), summaries


@pytest.mark.parametrize("credit", ["step", "token"])
@pytest.mark.parametrize("pack", [False, True])
def test_the_learner_trains_the_summary_tokens(tok, credit, pack):
    batch, summaries = _batch(tok)
    groups = batching.trainable_groups(batch)
    rewards = batching.episode_rewards([g for g, _ in groups])
    returns = [[ret.discounted_returns(ep, 1.0) for ep in g] for g in rewards]
    advantages = adv.compute_advantages(returns, "grpo", credit)
    rows = batching.build_rows(groups, advantages, rewards)
    seqs = batching.training_sequences(rows, pack)
    if pack:  # a summary ends a sequence (it extends the steps before it); the next starts one
        starts = {rows[s[0]].step_index for s in seqs if rows[s[0]].episode_index == 0}
        assert starts == {0, 5, 8}
    checked = 0
    for seq in seqs:
        mb = batching.collate_sequences(rows, [seq], pad_id=0)
        for i in seq:
            r = rows[i]
            if r.step_index not in summaries:
                continue
            start, end = len(r.context_ids), r.length
            assert mb.action_mask[0, start:end].all()  # every summary token is trained
            assert mb.input_ids[0, start:end].tolist() == [*enc(tok, SUMMARY), IM_END]
            a = mb.advantages[0, start:end]
            assert (a != 0).all() and (a == r.advantage).all()
            assert mb.behavior_logprobs[0, start:end].tolist() == [ACTION_LOGPROB] * (end - start)
            checked += 1
        assert mb.num_action_tokens == sum(len(rows[i].action_ids) for i in seq)
    assert checked == 2 * len(summaries)
    # Step credit: the solved episode's summary steps are ahead of the cut one's.
    adv_of = {(r.episode_index, r.step_index): r.advantage for r in rows}
    for i in summaries:
        assert adv_of[(0, i)] > 0 > adv_of[(1, i)]


# --------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "message"), [
    (["context.builder=compact", "context.max_tokens=1900"],
     "context.max_tokens: context.max_tokens (1900) + engine.max_new_tokens (256)"),
    (["context.builder=compact", "context.max_tokens=1700", "context.summary_max_tokens=400",
      "engine.max_new_tokens=64"],
     "context.max_tokens: context.max_tokens (1700) + context.summary_max_tokens (400) must "
     "leave room in model.max_model_len (2048) for the compaction request"),
    (["context.builder=compact", "context.max_tokens=200", "context.summary_max_tokens=200"],
     "context.summary_max_tokens: (200) must be below context.max_tokens (200)"),
    (["context.summary_max_tokens=0"], "context.summary_max_tokens: must be >= 1"),
    (["context.summary_prompt=' '"], "context.summary_prompt: must not be empty"),
])
def test_a_budget_without_room_is_a_config_error_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        config_from_dict({}, overrides)
    assert message in str(info.value)


def test_the_request_is_measured_with_the_tokenizer_when_the_rollout_is_built(tok):
    base = ["context.builder=compact", "model.max_model_len=512", "engine.max_new_tokens=16",
            "context.summary_max_tokens=200"]
    request_len = compact(1).request_len(tok)
    assert request_len == len(History(tok).request_ids(SUMMARY_PROMPT)) > 20
    fits = config_from_dict({}, [*base, f"context.max_tokens={512 - 200 - request_len}"])
    assert isinstance(Rollout.from_config(fits, summary_engine(tok), tok, "x", "a0").builder,
                      CompactContext)
    over = config_from_dict({}, [*base, f"context.max_tokens={512 - 200 - request_len + 1}"])
    with pytest.raises(ValueError, match=r"^context\.max_tokens: .*the compaction request "
                                         rf"\({request_len} tokens, context\.summary_prompt\)"):
        Rollout.from_config(over, summary_engine(tok), tok, "x", "a0")


def test_the_compact_settings_key_the_warm_start_only_under_compact():
    from agent_r1_async.run.warm_start import warm_start_key

    def key(*overrides: str) -> str:
        return warm_start_key(config_from_dict({}, ["learner.bf16=false", *overrides]))

    assert key("context.summary_max_tokens=100") == key("context.summary_prompt=Sum up.") == key()
    compact_keys = {key("context.builder=compact", o) for o in (
        "context.summary_max_tokens=100", "context.summary_prompt=Sum up.", "context.last_k=4")}
    assert len(compact_keys) == 3 and key() not in compact_keys

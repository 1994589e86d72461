"""SFT demonstrations: the actors' step layout, exact mask coverage, JSONL == oracle == rollout."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_r1_async.actors.context import make_context_builder, tools_text
from agent_r1_async.actors.rollout import EpisodeIds, Rollout
from agent_r1_async.config import ContextConfig, EnvConfig, config_from_dict
from agent_r1_async.envs.arithmetic import SYSTEM_PROMPT, Calculator
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from agent_r1_async.sft.demos import (
    DemoError,
    assistant_text,
    jsonl_demos,
    oracle_demos,
    replay_oracle,
    transcript_demo,
)
from agent_r1_async.sft.train import demo_pairs, sft_micro_batches
from agent_r1_async.wire.messages import StepRecord
from tests.fakes.engine import FakeEngine

EOS = 2  # <|im_end|> in the SmolLM2 tokenizer
CALC_TOOLS = [{"type": "function", "function": {
    "name": Calculator.name, "description": Calculator.description,
    "parameters": Calculator.parameters}}]


@pytest.fixture(scope="module")
def tok():
    t = load_tokenizer(tiny_model_dir())
    assert t.eos_token_id == EOS and t.eos_token == "<|im_end|>"
    return t


@pytest.fixture(scope="module")
def spec():
    return get_env_spec(EnvConfig(name="arithmetic", max_turns=3))


@pytest.fixture(scope="module")
def task(spec):
    return spec.tasks("dev")[0]


def _builder(tok, **kw):
    return make_context_builder(ContextConfig(**kw), tok)


def _demo(spec, task, tok, **kw):
    return asyncio.run(replay_oracle(spec, task, tok, _builder(tok, **kw)))


def _chat_ids(tok, messages) -> list[int]:
    """The whole conversation tokenized by the tokenizer's own template, in one go."""
    return tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)[
        "input_ids"]


def _call_text(expr: str) -> str:
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}</tool_call>'


def _transcript(task, result: str, tool_role: str = "tool") -> list[dict]:
    """The oracle's episode written as a chat transcript (tool output as a `tool` message)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": _call_text(task.meta["expression"])},
        {"role": tool_role, "content": result},
        {"role": "assistant", "content": f"<answer>{task.answer}</answer>"},
    ]


def test_oracle_episode_layout_is_the_chat_template_and_masks_cover_exactly_the_actions(
    spec, task, tok
):
    demo = _demo(spec, task, tok)
    assert demo.outcome_reward == 1.0 and len(demo.steps) == 2
    s0, s1 = demo.steps
    result = str(task.answer)  # one-op problem: the calculator returns the answer itself
    call = _call_text(task.meta["expression"])
    answer = f"<answer>{task.answer}</answer>"
    # Step 0 sees system + user + the generation prompt; it emits the call then <|im_end|>.
    # SmolLM2's template ignores `tools=`, so the calculator's schema is in the system message
    # as the fallback text block: the model sees the tool's description and parameters.
    instr = [{"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{tools_text(CALC_TOOLS)}"},
             {"role": "user", "content": task.prompt}]
    assert '"description": "Evaluate an arithmetic expression' in instr[0]["content"]
    assert s0.context_ids == _chat_ids(tok, instr)
    assert s0.action_ids == [*tok.encode(call, add_special_tokens=False), EOS]
    # Step 1 sees the whole conversation so far, tool output as the ToolEnv renders it.
    convo = [*instr, {"role": "assistant", "content": call},
             {"role": "user", "content": f"<tool_response>\n{result}\n</tool_response>"}]
    assert s1.context_ids == _chat_ids(tok, convo)
    assert s1.context_ids[: len(s0.context_ids) + len(s0.action_ids)] == [
        *s0.context_ids, *s0.action_ids]
    assert s1.action_ids == [*tok.encode(answer, add_special_tokens=False), EOS]

    mbs = sft_micro_batches(demo_pairs([demo]), max_tokens=4096, pad_id=EOS)
    assert len(mbs) == 1
    mb = mbs[0]
    assert mb.input_ids.shape[0] == 2
    # Longest row first: step 1 (row 0) then step 0 (row 1), right-padded to step 1's length.
    for row, step in ((0, s1), (1, s0)):
        c, a = len(step.context_ids), len(step.action_ids)
        mask = mb.action_mask[row].tolist()
        assert mask == [False] * c + [True] * a + [False] * (len(mask) - c - a)
        assert mb.attention_mask[row].tolist() == [1] * (c + a) + [0] * (len(mask) - c - a)
        trained = mb.input_ids[row][mb.action_mask[row]].tolist()
        assert trained == step.action_ids and trained[-1] == EOS
    # By hand: what carries loss is the two action texts, each closed by exactly one <|im_end|>;
    # the turn's "\n" after it, the tool response and every prompt token do not.
    assert tok.decode(mb.input_ids[1][mb.action_mask[1]]) == call + "<|im_end|>"
    assert tok.decode(mb.input_ids[0][mb.action_mask[0]]) == answer + "<|im_end|>"
    assert mb.num_action_tokens == len(s0.action_ids) + len(s1.action_ids)


def _rollout_pairs(spec, task, tok, actions, builder) -> list[tuple[list[int], list[int]]]:
    rollout = Rollout(
        engine=FakeEngine.scripted(actions), tokenizer=tok, builder=builder, env_name=spec.name,
        actor_id="a0", max_model_len=2048, max_turns=spec.env_cfg.max_turns,
        step_timeout_s=10.0,
    )
    steps: list[StepRecord] = []

    async def emit(msg) -> None:
        if isinstance(msg, StepRecord):
            steps.append(msg)

    end = asyncio.run(rollout.run(spec.make, task, EpisodeIds("e", "g", 1), emit))
    assert end.status == "ok" and end.outcome_reward == 1.0
    return [(s.context_ids, s.action_ids) for s in steps]


@pytest.mark.parametrize("ctx", [{"builder": "full"}, {"builder": "last_k", "last_k": 1}])
def test_oracle_jsonl_and_rollout_give_identical_rows(spec, task, tok, tmp_path, ctx):
    demo = _demo(spec, task, tok, **ctx)
    rows = [(s.context_ids, s.action_ids) for s in demo.steps]
    # A rollout whose engine samples exactly the demo's action ids records the same rows.
    rollout = _rollout_pairs(spec, task, tok, [a for _, a in rows], _builder(tok, **ctx))
    assert rollout == rows
    # The same turns as a JSONL transcript (plain `tool` message, and OpenAI tool_calls form).
    openai = _transcript(task, str(task.answer))
    openai[2] = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c1", "type": "function", "function": {
            "name": "calculator",
            "arguments": json.dumps({"expression": task.meta["expression"]})}}]}
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join(json.dumps({"messages": m, "tools": CALC_TOOLS}) for m in
                              (_transcript(task, str(task.answer)), openai)) + "\n\n")
    from_jsonl = jsonl_demos(path, tok, _builder(tok, **ctx), max_model_len=2048)
    assert [d.source for d in from_jsonl] == [f"{path}:1", f"{path}:2"]
    for d in from_jsonl:
        assert [(s.context_ids, s.action_ids) for s in d.steps] == rows


def test_openai_tool_calls_render_as_hermes_text():
    msg = {"role": "assistant", "content": "Let me compute.", "tool_calls": [
        {"id": "1", "type": "function",
         "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}},
        {"function": {"name": "search", "arguments": {"query": "Ivy"}}},  # dict arguments
    ]}
    assert assistant_text(msg, "x") == (
        "Let me compute.\n"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"query": "Ivy"}}</tool_call>'
    )
    bad = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}
    with pytest.raises(DemoError, match=r"x\.tool_calls\[0\]: arguments are not JSON"):
        assistant_text(bad, "x")
    with pytest.raises(DemoError, match="neither content nor tool_calls"):
        assistant_text({"role": "assistant", "content": ""}, "x")


def test_tool_messages_become_one_toolenv_user_turn_unless_kept(tok):
    b = _builder(tok)
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
        {"role": "assistant", "content": "b"},
    ]
    ctx = transcript_demo(msgs, tok, b, "m").steps[1].context_ids
    merged = "<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
    assert tok.decode(ctx).endswith(
        f"<|im_start|>user\n{merged}<|im_end|>\n<|im_start|>assistant\n")
    kept = transcript_demo(msgs, tok, b, "m", tool_as_user=False).steps[1].context_ids
    assert tok.decode(kept).endswith(
        "<|im_start|>tool\nr1<|im_end|>\n<|im_start|>tool\nr2<|im_end|>\n<|im_start|>assistant\n")


def test_bad_transcripts_name_where(tok, tmp_path):
    b = _builder(tok)
    with pytest.raises(DemoError, match=r"m: messages\[0\]: the first assistant message"):
        transcript_demo([{"role": "assistant", "content": "hi"}], tok, b, "m")
    with pytest.raises(DemoError, match="no assistant message"):
        transcript_demo([{"role": "user", "content": "hi"}], tok, b, "m")
    p = tmp_path / "bad.jsonl"
    p.write_text('{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", '
                 '"content": "a"}]}\nnot json\n')
    with pytest.raises(DemoError, match=r"bad\.jsonl:2: not valid JSON"):
        jsonl_demos(p, tok, b, max_model_len=2048)
    with pytest.raises(DemoError, match="does not exist"):
        jsonl_demos(tmp_path / "missing.jsonl", tok, b, max_model_len=2048)


def test_oracle_demos_limit_and_length_filter(spec, tok):
    tasks = spec.tasks("dev")[:5]
    demos = oracle_demos(spec, tasks, tok, _builder(tok), max_model_len=2048, limit=3)
    assert [d.source for d in demos] == [t.task_id for t in tasks[:3]]
    with pytest.raises(DemoError, match="too long 5"):
        oracle_demos(spec, tasks, tok, _builder(tok), max_model_len=64)


def test_sft_config_section_validates_and_names_keys():
    cfg = config_from_dict({"sft": {"demos_source": "jsonl", "jsonl_path": "d.jsonl"}})
    assert cfg.sft.demos_source == "jsonl" and cfg.sft.epochs == 2
    with pytest.raises(ValueError, match=r"sft\.jsonl_path"):
        config_from_dict({"sft": {"demos_source": "jsonl"}})
    with pytest.raises(ValueError, match=r"sft\.batch_episodes"):
        config_from_dict({"sft": {"batch_episodes": 0}})
    with pytest.raises(ValueError, match=r"unknown config key `sft\.epoch`"):
        config_from_dict({"sft": {"epoch": 1}})


def test_lr_schedule_by_hand():
    from agent_r1_async.sft.train import lr_factor

    # warmup 2 of 10 steps: 1/3, 2/3, then linear decay (10 - s) / 8 from 1 down to 1/8.
    got = [lr_factor(s, 10, 2, "linear") for s in range(10)]
    want = [1 / 3, 2 / 3, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8]
    assert got == pytest.approx(want, abs=1e-12)
    assert [lr_factor(s, 4, 0, "constant") for s in range(4)] == [1.0] * 4


def test_jsonl_demos_draw_in_the_seeded_order_and_skip_the_offset(tok, tmp_path):
    """A JSONL file's transcripts follow `sft.demo_seed` and `sft.demo_offset` as oracle
    demonstrations do: a seed's first D and the same seed's offset D never share a line."""
    b = _builder(tok)
    p = tmp_path / "demos.jsonl"
    p.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}) + "\n"
        for i in range(1, 9)))

    def lines(**kw):
        return [int(d.source.rsplit(":", 1)[1])
                for d in jsonl_demos(p, tok, b, max_model_len=2048, **kw)]

    assert lines(limit=3) == [1, 2, 3]
    assert lines(offset=6) == [7, 8]
    first, rest = lines(seed=0, limit=3), lines(seed=0, offset=3)
    assert len(first) == 3 and len(rest) == 5 and sorted(first + rest) == list(range(1, 9))
    assert lines(seed=0) == first + rest  # one order, cut at the offset
    assert lines(seed=0) != lines(seed=1) and lines(seed=0) != list(range(1, 9))
    with pytest.raises(DemoError, match=r"no transcripts after skipping the first 8 "
                                        r"\(sft.demo_offset\)"):
        jsonl_demos(p, tok, b, max_model_len=2048, offset=8)

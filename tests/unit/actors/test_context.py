"""Context building: exact action ids, template consistency (SmolLM2 ChatML), the 3 builders."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import random

import pytest

from agent_r1_async.actors.context import (
    FullContext,
    History,
    LastKContext,
    TruncateContext,
    Turn,
    _assemble,
    make_context_builder,
)
from agent_r1_async.config import ContextConfig, EnvConfig
from agent_r1_async.envs.registry import get_env_spec

IM_START, IM_END, NL = 1, 2, 198  # SmolLM2: <|im_start|>, <|im_end|>, "\n"

# Qwen2.5's layout for tool messages (consecutive `tool` messages share one user turn).
QWEN_LIKE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

INSTRUCTION = [
    {"role": "system", "content": "Use the search tool."},
    {"role": "user", "content": "Which river flows through the capital of Veltrania?"},
]
A1 = '<tool_call>{"name": "search", "arguments": {"query": "capital of Veltrania"}}</tool_call>'
O1 = [
    {
        "role": "user",
        "content": "<tool_response>\n(1) Veltrania: Its capital is Ostrum.\n</tool_response>",
    }
]
A2 = '<tool_call>{"name": "search", "arguments": {"query": "Ostrum river"}}</tool_call>'
O2 = [
    {
        "role": "user",
        "content": "<tool_response>\n(1) Ostrum: The Kell River flows.\n</tool_response>",
    }
]
A3 = "<answer>Kell River</answer>"


def enc(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def reference(tok, messages, gen=True) -> list[int]:
    return list(
        tok.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=gen, return_dict=False
        )
    )


def three_turns(tok) -> History:
    h = History(tok)
    h.add_messages(INSTRUCTION)
    h.add_action([*enc(tok, A1), IM_END])
    h.add_messages(O1)
    h.add_action([*enc(tok, A2), IM_END])
    h.add_messages(O2)
    return h


def test_segments_concatenate_to_apply_chat_template(tok):
    h = three_turns(tok)
    conv = [
        *INSTRUCTION,
        {"role": "assistant", "content": A1},
        *O1,
        {"role": "assistant", "content": A2},
        *O2,
    ]
    assert FullContext().build(h) == reference(tok, conv)
    assert h.generation_prompt == [IM_START, *enc(tok, "assistant\n")]
    assert h.full_ids() == reference(tok, conv, gen=False)


def test_instruction_without_system_gets_the_template_default(tok):
    h = History(tok)
    h.add_messages(INSTRUCTION[1:])
    assert FullContext().build(h) == reference(tok, INSTRUCTION[1:])
    assert "You are a helpful AI assistant named SmolLM" in tok.decode(h.instruction_ids)


def test_action_ids_are_kept_exactly_even_when_not_canonical(tok):
    # "Kell" spelled one character per token: the canonical encoding differs, the context
    # must still contain exactly these ids.
    odd = [t for ch in "Kell" for t in enc(tok, ch)]
    assert odd != enc(tok, "Kell")
    h = History(tok)
    h.add_messages(INSTRUCTION)
    h.add_action([*odd, IM_END])
    ctx = FullContext().build(h)
    n = len(h.instruction_ids) + len(h.generation_prompt)
    assert ctx[n : n + len(odd) + 2] == [*odd, IM_END, NL]
    assert ctx[n + len(odd) + 2 :] == h.generation_prompt
    assert h.turns[0].action_ids == [*odd, IM_END]


def test_length_stopped_action_is_closed_in_the_context(tok):
    h = History(tok)
    h.add_messages(INSTRUCTION)
    cut = enc(tok, '<tool_call>{"name": "sea')
    h.add_action(cut)  # finish_reason "length": no <|im_end|>
    assert h.turns[0].action_ids == cut and h.turns[0].close_ids == [IM_END, NL]
    h2 = History(tok)
    h2.add_messages(INSTRUCTION)
    h2.add_action([*cut, IM_END])
    assert h2.turns[0].close_ids == [NL]
    # both contexts continue identically after the action
    assert FullContext().build(h)[-6:] == FullContext().build(h2)[-6:]


def test_last_k_keeps_instruction_and_last_turns(tok):
    h = three_turns(tok)
    h.add_action([*enc(tok, A3), IM_END])
    t = h.turns
    ctx = LastKContext(2).build(h)
    assert ctx == h.instruction_ids + t[1].ids() + t[2].ids() + h.generation_prompt
    assert LastKContext(10).build(h) == FullContext().build(h)
    assert make_context_builder(ContextConfig(builder="last_k", last_k=1), tok).build(h) == (
        h.instruction_ids + t[2].ids() + h.generation_prompt
    )


def test_truncate_drops_oldest_whole_turns_within_budget(tok):
    h = three_turns(tok)
    t = h.turns
    fixed = len(h.instruction_ids) + len(h.generation_prompt)
    # Budget for exactly the newest turn (one token short of also fitting turn 0):
    budget = fixed + len(t[1]) + len(t[0]) - 1
    ctx = TruncateContext(budget).build(h)
    assert ctx == h.instruction_ids + t[1].ids() + h.generation_prompt and len(ctx) <= budget
    # A budget that fits everything is the full context; one below the instruction keeps it.
    assert TruncateContext(fixed + len(t[0]) + len(t[1])).build(h) == FullContext().build(h)
    assert TruncateContext(fixed - 1).build(h) == h.instruction_ids + h.generation_prompt



def _sized_history(tok, lengths: list[int]) -> History:
    """A history whose instruction has 10 ids and whose turns have `lengths` ids each."""
    h = History(tok)
    h.instruction_ids = [7] * 10
    h.turns = [Turn([], [100 + i] * n, []) for i, n in enumerate(lengths)]
    return h


def test_truncate_to_cuts_lower_so_the_contexts_until_the_next_cut_extend_each_other(tok):
    fixed = 10 + len(History(tok).generation_prompt)
    lengths = [8] * 7
    # max_tokens fits 3 turns, truncate_to 1: a cut at the 4th turn keeps it alone, the 5th and
    # 6th extend that context, the 7th cuts again (by hand: first kept 0,0,0,3,3,3,6)
    builder = TruncateContext(fixed + 24, truncate_to=fixed + 10)
    every_step = TruncateContext(fixed + 24)
    firsts, contexts = [], []
    for n in range(1, 8):
        h = _sized_history(tok, lengths[:n])
        firsts.append(builder.first_kept(h))
        contexts.append(builder.build(h))
        assert len(contexts[-1]) <= fixed + 24
        assert contexts[-1] == _assemble(h, h.turns[firsts[-1]:])
    assert firsts == [0, 0, 0, 3, 3, 3, 6]
    assert [every_step.first_kept(_sized_history(tok, lengths[:n])) for n in range(1, 8)] == [
        0, 0, 0, 1, 2, 3, 4]
    prompt = len(History(tok).generation_prompt)
    extends = [cur[:len(prev) - prompt] == prev[:-prompt]
               for prev, cur in itertools.pairwise(contexts)]
    assert extends == [True, True, False, True, True, False]
    # a newest turn too long for truncate_to: the cut keeps what fits max_tokens (turns 1, 2);
    # one too long for max_tokens: only the instruction is left
    assert TruncateContext(fixed + 30, fixed + 10).first_kept(_sized_history(tok, [8, 8, 20])) == 1
    assert TruncateContext(fixed + 30, fixed + 10).first_kept(_sized_history(tok, [8, 40])) == 2
    assert make_context_builder(ContextConfig(builder="truncate", max_tokens=900, truncate_to=500),
                                tok).truncate_to == 500
    with pytest.raises(ValueError, match="truncate_to must be in"):
        TruncateContext(100, 101)


def test_truncate_to_zero_keeps_the_longest_suffix_that_fits_at_every_step(tok):
    """truncate_to 0 is the plain cut: the newest turns that fit, found from the newest back."""
    rng = random.Random(5)
    for _ in range(200):
        lengths = [rng.randint(1, 30) for _ in range(rng.randint(0, 12))]
        h = _sized_history(tok, lengths)
        budget = len(h.instruction_ids) + len(h.generation_prompt) + rng.randint(-5, 80)
        room, kept = budget - len(h.instruction_ids) - len(h.generation_prompt), 0
        for n in reversed(lengths):
            if n > room:
                break
            room, kept = room - n, kept + 1
        assert TruncateContext(budget).first_kept(h) == len(lengths) - kept

def test_qwen_style_tool_role_template_is_consistent(tok):
    qtok = copy.copy(tok)  # shares the vocabulary, own chat template
    qtok.chat_template = QWEN_LIKE
    obs = [{"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]
    h = History(qtok)
    h.add_messages(INSTRUCTION)
    h.add_action([*enc(qtok, A1), IM_END])
    h.add_messages(obs)
    conv = [*INSTRUCTION, {"role": "assistant", "content": A1}, *obs]
    assert FullContext().build(h) == reference(qtok, conv)
    assert qtok.decode(h.turns[0].observation_ids).count("<|im_start|>user") == 1


def test_errors(tok):
    h = History(tok)
    with pytest.raises(ValueError, match="before any instruction"):
        h.add_action([5])
    with pytest.raises(ValueError, match="last_k"):
        LastKContext(0)


# A Qwen2.5-style template that renders `tools` in the system turn (as Qwen/Hermes/Llama 3 do).
QWEN_TOOLS = (
    "{%- if tools %}{{- '<|im_start|>system\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n<tools>' }}{%- for t in tools %}{{- '\n' + (t | tojson) }}{%- endfor %}"
    "{{- '\n</tools><|im_end|>\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
SEARCH = [{"type": "function", "function": {
    "name": "search", "description": "Search the corpus for passages.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]


def test_tools_are_rendered_by_a_template_that_supports_them(tok):
    qtok = copy.copy(tok)
    qtok.chat_template = QWEN_TOOLS
    h = History(qtok)
    assert h.template.native_tools
    h.add_messages(INSTRUCTION, tools=SEARCH)
    h.add_action([*enc(qtok, A1), IM_END])
    h.add_messages(O1)
    conv = [*INSTRUCTION, {"role": "assistant", "content": A1}, *O1]
    want = list(qtok.apply_chat_template(conv, tools=SEARCH, tokenize=True,
                                         add_generation_prompt=True, return_dict=False))
    assert FullContext().build(h) == want
    assert '"description": "Search the corpus for passages."' in qtok.decode(h.instruction_ids)


def test_tools_become_a_system_text_block_when_the_template_ignores_them(tok):
    h = History(tok)  # SmolLM2's ChatML template has no tool support
    assert not h.template.native_tools
    h.add_messages(INSTRUCTION, tools=SEARCH)
    sys_text = (f"{INSTRUCTION[0]['content']}\n\nYou can call these tools (one JSON signature "
                "per line):\n<tools>\n" + json.dumps(SEARCH[0]["function"]) + "\n</tools>\n"
                'Call one as <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.')
    want = [{"role": "system", "content": sys_text}, INSTRUCTION[1]]
    assert FullContext().build(h) == reference(tok, want)
    # Without a system message the block becomes one.
    h2 = History(tok)
    h2.add_messages(INSTRUCTION[1:], tools=SEARCH)
    assert tok.decode(h2.instruction_ids).startswith("<|im_start|>system\nYou can call these tools")
    with pytest.raises(ValueError, match="only be given with the instruction"):
        h.add_action([5, IM_END])
        h.add_messages(O1, tools=SEARCH)


@pytest.mark.parametrize("name", ["arithmetic", "multihop_qa", "python_tool"])
def test_every_builtin_env_shows_its_tool_schemas_to_the_model(tok, name):
    spec = get_env_spec(EnvConfig(name=name))
    task = spec.tasks("dev")[0]
    env = spec.make()
    obs = asyncio.run(env.reset(task))
    assert [t["function"]["name"] for t in obs.tools] == list(env.tools)
    h = History(tok)
    h.add_messages(obs.messages, obs.tools)
    text = tok.decode(h.instruction_ids)
    for tool in env.tools.values():
        assert json.dumps({"name": tool.name, "description": tool.description,
                           "parameters": tool.parameters}) in text

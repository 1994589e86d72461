"""What bench/bench_vs_trl.py relies on to compare like with like: TRL's side renders an episode
to exactly the token ids our context builder gives the model, and its reward function (a replay
of TRL's assistant turns through our env) pays what our env pays; plus the bench's arm order
and its summary arithmetic, by hand.
"""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from agent_r1_async.actors.context import History
from agent_r1_async.config import EnvConfig
from agent_r1_async.envs.registry import get_env_spec
from agent_r1_async.envs.toolenv import ToolCall, tool_call_text
from agent_r1_async.models import load_tokenizer, tiny_model_dir
from tests.unit.bench.test_smoke import load

IM_END = 2  # SmolLM2 <|im_end|>


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("bench_vs_trl")


@pytest.fixture(scope="module")
def spec():
    return get_env_spec(EnvConfig(name="arithmetic", max_turns=3))


@pytest.fixture(scope="module")
def task(spec):
    return spec.tasks("train")[0]


def call_msg(expression: str) -> dict:
    """An assistant turn as TRL's tool loop stores it after parsing `<tool_call>{json}`."""
    fn = {"name": "calculator", "arguments": {"expression": expression}}
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": fn}]}


def test_trl_template_renders_an_episode_to_our_context_ids(bench, spec, task) -> None:
    tok = load_tokenizer(tiny_model_dir())  # the real SmolLM2 tokenizer

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    env = spec.make()
    obs = asyncio.run(env.reset(task))
    expr = task.meta["expression"]
    call = tool_call_text(ToolCall("calculator", {"expression": expr}))
    answer = f"<answer>{task.answer}</answer>"
    ours = History(tok)  # what our actor feeds the model
    ours.add_messages(obs.messages, obs.tools)
    ours.add_action([*enc(call), IM_END])
    ours.add_messages(asyncio.run(env.step(call)).observation.messages)
    ours.add_action([*enc(answer), IM_END])

    result = asyncio.run(bench.CalculatorTools().calculator(expr))  # TRL's tool
    assert result == str(task.answer)
    prompt = bench.trl_prompt(obs)
    conv = [*prompt, call_msg(expr), {"role": "tool", "name": "calculator", "content": result},
            {"role": "assistant", "content": answer}]

    def trl(messages: list, gen: bool) -> list[int]:
        return list(tok.apply_chat_template(
            messages, chat_template=bench.CHATML_TOOLS, tools=obs.tools, tokenize=True,
            add_generation_prompt=gen, return_dict=False))

    # the first generation prompt and the whole episode: the same ids on both sides
    assert trl(prompt, True) == [*ours.instruction_ids, *ours.generation_prompt]
    assert trl(conv, False) == ours.full_ids()
    assert '"name": "calculator"' in tok.decode(ours.instruction_ids)  # the schema is shown


def test_action_texts_are_the_hermes_calls_our_env_parses(bench) -> None:
    completion = [call_msg("2+3"), {"role": "tool", "content": "5"},
                  {"role": "assistant", "content": "<answer>5</answer>"}]
    assert bench.action_texts(completion) == [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>',
        "<answer>5</answer>",
    ]


def test_reward_replay_pays_what_the_env_pays(bench, spec, task) -> None:
    expr, gold = task.meta["expression"], task.answer
    right, wrong = tool_call_text(ToolCall("calculator", {"expression": expr})), \
        tool_call_text(ToolCall("calculator", {"expression": f"{gold}+1"}))

    def ret(actions: list[str]) -> float:
        return bench.env_return(spec, task, actions)

    # 0.1 first well-formed call + 0.2 a result equal to the answer + 1.0 the right answer
    assert ret([right, f"<answer>{gold}</answer>"]) == pytest.approx(1.3, abs=1e-12)
    assert ret([wrong, f"<answer>{gold + 1}</answer>"]) == pytest.approx(0.1, abs=1e-12)
    assert ret([f"<answer>{gold}</answer>"]) == pytest.approx(1.0, abs=1e-12)
    # TRL stopped after its tool rounds without an answer: process rewards, no outcome
    assert ret([right]) == pytest.approx(0.3, abs=1e-12)
    # a third call is out of turns (env.max_turns 3): truncated, paid nothing more
    assert ret([right, wrong, right]) == pytest.approx(0.3, abs=1e-12)
    # a malformed call costs 0.1
    assert ret(["<tool_call>{not json</tool_call>", f"<answer>{gold}</answer>"]) == \
        pytest.approx(0.9, abs=1e-12)


def test_arm_order_rotates_by_seed(bench) -> None:
    arms = ["ours", "ours-sync", "ours-hf", "trl"]
    assert bench.arm_order(arms, 0) == arms
    assert bench.arm_order(arms, 1) == ["ours-sync", "ours-hf", "trl", "ours"]
    assert bench.arm_order(arms, 5) == ["ours-sync", "ours-hf", "trl", "ours"]


def test_summary_ratios_and_intervals_by_hand(bench) -> None:
    rows = [
        {"arm": "ours", "seed": 0, "rate": 0.3, "return": 1.0, "success": 0.6},
        {"arm": "ours", "seed": 1, "rate": 0.4, "return": 1.2, "success": 0.8},
        {"arm": "trl", "seed": 0, "rate": 0.2, "return": 0.9, "success": 0.5},
        {"arm": "trl", "seed": 1, "rate": 0.2, "return": 0.9, "success": 0.5},
    ]
    lines = bench.summarize(rows)
    # ratios 1.5, 2.0: mean 1.75, sd 0.3536, se 0.25, t(1) 12.706 -> ± 3.18
    # return differences +0.1, +0.3: mean 0.2, se 0.1 -> ± 1.271
    assert ("ours / trl: samples/s 1.75× ± 3.18 (per seed 1.50, 2.00); held-out return "
            "0.200 ± 1.271 (n=2) (per seed +0.100, +0.300)") in lines
    ours = next(line for line in lines if line.startswith("ours "))
    # rates 0.3, 0.4: mean 0.35, se 0.05 -> ± 0.635
    assert "0.350 ± 0.635 (n=2)" in ours


def test_launch_metrics_reads_the_names_the_launch_logs(bench, tmp_path) -> None:
    """Staleness and learner idleness under the names the launch writes to metrics.jsonl
    (run/output/metric_names.py `_RENAME`); the bench once read names no record has, printing
    0.00."""
    import json

    from agent_r1_async.run.output.metric_names import _RENAME

    stale, idle = _RENAME["staleness_mean"], _RENAME["idle_frac"]
    rows = [{"update": 1, "learner/episodes": 16.0, stale: 1.0, idle: 0.5},
            {"update": 2, "learner/episodes": 16.0, stale: 1.5, idle: 0.0},
            {"update": 2, "eval/periodic/em": 0.3}]  # not an update: skipped
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.launch_metrics(tmp_path) == {
        "samples": 32.0, "updates": 2.0, "staleness": 1.25, "idle": 0.25}


def test_equal_update_rows_compare_returns_at_trls_update_counts(bench) -> None:
    rows = [
        {"arm": "trl", "seed": 0, "rate": 0.2, "return": 0.9, "success": 0.5, "updates": 6.0},
        {"arm": "trl", "seed": 1, "rate": 0.2, "return": 0.7, "success": 0.4, "updates": 7.0},
        {"arm": "ours@trl-updates", "seed": 0, "rate": 0.9, "return": 1.0, "success": 0.6},
        {"arm": "ours@trl-updates", "seed": 1, "rate": 0.8, "return": 1.0, "success": 0.6},
    ]
    lines = bench.summarize(rows)
    # differences +0.1, +0.3 (as above): 0.200 ± 1.271; no samples/s ratio at equal updates
    assert ("ours@trl-updates − trl, at TRL's update counts (6, 7): held-out return "
            "0.200 ± 1.271 (n=2) (per seed +0.100, +0.300)") in lines
    assert not any(line.startswith("ours@trl-updates / trl") for line in lines)


def test_trl_setups_one_factor_at_a_time_then_the_faster_levels_combined(bench) -> None:
    base = bench.trl_base_setup(savers=True) | {"bf16": True}
    setups = bench.one_factor_setups(base)
    assert setups[0] == base and len(setups) == 1 + len(bench.TRL_FACTORS)
    for setup in setups[1:]:  # each differs from the base in exactly one factor
        assert sum(setup[k] != base[k] for k in bench.TRL_FACTORS) == 1
    step_s = {(): 50.0, ("bf16",): 60.0, ("gradient_checkpointing",): 40.0,
              ("continuous_batching",): 50.0, ("generation_batch_size",): 45.0}
    rows = [{"setup": s, "step_s": step_s[tuple(k for k in bench.TRL_FACTORS if s[k] != base[k])]}
            for s in setups]
    # fp32 slower (kept bf16), checkpointing off faster, continuous batching a tie (kept
    # plain generate), a generation batch of 32 faster
    assert bench.combined_setup(base, rows) == {
        "bf16": True, "gradient_checkpointing": False, "continuous_batching": False,
        "generation_batch_size": 32}


def test_seconds_per_step_leave_the_first_step_out(bench) -> None:
    # step ends 100 (model load + first generation), 130, 150, 180, 200: 100 s over 4 steps
    assert bench.seconds_per_step([100.0, 130.0, 150.0, 180.0, 200.0]) == 25.0
    with pytest.raises(ValueError, match="1 steps"):
        bench.seconds_per_step([100.0])


def test_trl_setup_reads_the_sweeps_fastest(bench, tmp_path) -> None:
    import argparse
    import json

    fastest = {"bf16": False, "gradient_checkpointing": False, "continuous_batching": True,
               "generation_batch_size": 32}
    (tmp_path / "trl_setup.json").write_text(json.dumps({"fastest": fastest, "rows": []}))
    args = argparse.Namespace(trl_setup=str(tmp_path / "trl_setup.json"), memory_savers=True)
    assert bench.trl_setup(args) == fastest
    assert bench.setup_name(fastest) == (
        "fp32, checkpointing off, continuous batching, generation batch 32")
    args = argparse.Namespace(trl_setup="", memory_savers=False)
    assert bench.trl_setup(args) == {"bf16": None, "gradient_checkpointing": False,
                                     "continuous_batching": False, "generation_batch_size": 16}


def _row(arm: str, seed: int, machine: str) -> dict:
    return {"arm": arm, "seed": seed, "rate": 0.5, "return": 0.8, "success": 0.7,
            "updates": 10.0, "wall_s": 600.0, "peak_rss_gb": 5.0, "load_before": 1.0,
            "load_after": 1.0, "machine": machine}


def test_a_run_with_the_same_root_goes_on_where_it_stopped(bench, tmp_path, monkeypatch,
                                                           capsys) -> None:
    import json
    import sys

    from bench.stats import machine_line

    here = machine_line()
    (tmp_path / "results.jsonl").write_text(json.dumps(_row("ours", 0, here)) + "\n")
    calls: list[tuple[str, int]] = []

    def fake_run_arm(arm, seed, args, root, start, updates=None):
        calls.append((arm, seed))
        return _row(arm, seed, here)

    monkeypatch.setattr(bench, "run_arm", fake_run_arm)
    monkeypatch.setattr(bench, "shared_start", lambda: "start")
    monkeypatch.setattr(bench, "precision_line", lambda: "bf16")
    monkeypatch.setattr(sys, "argv", ["bench_vs_trl", "--arms", "ours", "ours-sync", "--seeds",
                                      "0", "1", "--root", str(tmp_path), "--skip-start-eval"])
    bench.main()
    # seed 0 (order ours, ours-sync): ours was done; seed 1 rotates: ours-sync, then ours
    assert calls == [("ours-sync", 0), ("ours-sync", 1), ("ours", 1)]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [(json.loads(x)["arm"], json.loads(x)["seed"]) for x in lines] == [("ours", 0), ("ours-sync", 0), ("ours-sync", 1), ("ours", 1)]
    out = capsys.readouterr().out
    assert "(done before)" in out
    assert "ours / ours-sync: samples/s 1.00× ± 0.00 (per seed 1.00, 1.00)" in out


def test_a_seed_begun_on_another_machine_is_refused(bench, tmp_path) -> None:
    import json

    (tmp_path / "results.jsonl").write_text(
        json.dumps(_row("ours", 0, "AMD EPYC (family 26), 2 cores, no AMX")) + "\n"
        + json.dumps(_row("ours", 1, "Intel Xeon (family 6), 2 cores, AMX")) + "\n")
    assert [r["seed"] for r in bench.done_rows(str(tmp_path), [1], "Intel Xeon (family 6), "
                                               "2 cores, AMX")] == [1]
    with pytest.raises(SystemExit, match="seed 0 began on another machine"):
        bench.done_rows(str(tmp_path), [0, 1], "Intel Xeon (family 6), 2 cores, AMX")


def test_a_setup_sweep_with_the_same_root_measures_only_what_it_lacks(bench, tmp_path,
                                                                      monkeypatch) -> None:
    import argparse
    import json

    from bench.stats import machine_line

    base = bench.trl_base_setup(savers=True) | {"bf16": True}
    setups = bench.one_factor_setups(base)  # base, fp32, checkpointing off, continuous, batch 32
    here = machine_line()
    done = [{"setup": s, "step_s": t, "step_ends": [], "peak_rss_gb": 5.0, "load_before": 1.0,
             "load_after": 1.0} for s, t in zip(setups[:2], [50.0, 60.0], strict=True)]
    (tmp_path / "trl_setup.json").write_text(json.dumps({"rows": done}))
    step_s = {2: 40.0, 3: 55.0, 4: 45.0}  # checkpointing off, continuous batching, batch 32
    measured: list[dict] = []

    def fake_trl(seed, minutes, root, start, setup, vllm=False, max_steps=0):
        measured.append(setup)
        t = step_s[setups.index(setup)] if setup in setups else 30.0
        return {"step_ends": [100.0 + t * i for i in range(max_steps)]}

    monkeypatch.setattr(bench, "run_trl_isolated", fake_trl)
    monkeypatch.setattr("agent_r1_async.precision.learner_bf16", lambda *a, **k: True)
    args = argparse.Namespace(memory_savers=True, setup_steps=5, trl_vllm=False)
    result = bench.trl_setup_sweep(args, str(tmp_path), "start")
    combined = {"bf16": True, "gradient_checkpointing": False, "continuous_batching": False,
                "generation_batch_size": 32}
    # the base and fp32 were measured before; the rest, then the combination, once each
    assert measured == [*setups[2:], combined]
    assert [r["step_s"] for r in result["rows"]] == [50.0, 60.0, 40.0, 55.0, 45.0, 30.0]
    assert result["fastest"] == combined and result["speedup_vs_base"] == 50.0 / 30.0
    assert all(r["machine"] == here for r in result["rows"][2:])
    again = bench.trl_setup_sweep(args, str(tmp_path), "start")  # nothing left to measure
    assert len(measured) == 4 and again["fastest"] == combined

    rows = json.loads((tmp_path / "trl_setup.json").read_text())["rows"]
    rows[0]["machine"] = "AMD EPYC (family 26), 2 cores, no AMX"
    (tmp_path / "trl_setup.json").write_text(json.dumps({"rows": rows}))
    with pytest.raises(SystemExit, match="measured on another machine"):
        bench.trl_setup_sweep(args, str(tmp_path), "start")

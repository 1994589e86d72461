"""Side by side with TRL's GRPOTrainer: trained samples/s and held-out return after T minutes,
with the two ablations that separate our engine from our async design.

    .venv/bin/python -m bench.bench_vs_trl --minutes 8 --seeds 0 1 2      # 5 arms: ~3 hours
    .venv/bin/python -m bench.bench_vs_trl --arms ours trl --minutes 8 --seeds 0 1 2
    .venv/bin/python -m bench.bench_vs_trl --arms ours --minutes 2 --seeds 0 --eval-tasks 8  # smoke
    .venv/bin/python -m bench.bench_vs_trl --trl-setup-sweep --root R     # TRL's fastest setup
    .venv/bin/python -m bench.bench_vs_trl --trl-setup R/trl_setup.json --equal-updates --minutes 10

TRL is the optional `peer` extra: `.venv/bin/pip install -e '.[peer]'` (trl==1.16.0, pure
Python; its dependencies are already in the venv). Without it the TRL side prints how to
install it and is skipped.

Same on both sides:
- model: the default launch's warm start (SmolLM2-135M-Instruct after 3 supervised steps on
  24 oracle demos; trained once and cached by `sft.warm_start`, outside the budget: both sides
  start from the same weights). The base model earns no reward here, so from it neither side
  would have anything to learn in minutes;
- task and reward: the `arithmetic` env's train split with its calculator tool, up to 3 turns
  (`env.max_turns`), the system prompt + problem through the same chat template, and the
  env's own return: 0.1 for the first well-formed calculator call, 0.2 when a calculator
  result equals the gold answer, 1.0 for the right `<answer>`. TRL runs the multi-turn episode
  with its tool loop (`environment_factory` exposing the same calculator, at most 2 tool
  rounds); its chat template is set to render tool results as our env does (a `user` turn of
  `<tool_response>` blocks) and tool calls are parsed from `<tool_call>{json}</tool_call>` (TRL's
  Qwen3 response template). Its reward function replays each completion's assistant turns
  through our env, so both sides are scored by the same code;
- GRPO as configs/default.yaml sets it: 8 samples per prompt, 2 prompts (16 episodes) per
  optimizer step, lr 1e-5 constant, AdamW, grad-norm clip 1.0, PPO clip 0.2 / 0.28
  (clip-higher), token-mean loss (TRL's `dapo`), group-std-normalized advantages, no KL,
  sampling T = 1, 96 new tokens a turn (TRL: 288 for the whole completion), the same seeds;
- precision: ours as `agent_r1_async.precision` resolves it for this CPU (bf16 autocast over
  fp32 master weights where bf16 matmuls measure faster than fp32 ones, `learner.bf16: auto`;
  the engine in bf16 where vLLM's bf16 linear is faster, `engine.dtype: auto`); TRL as its
  setup says (the base setup: the same resolution, `bf16=True` where ours is bf16; a setup
  sweep picks TRL's fastest on its own). The header prints both;
- the wall-clock budget T, counted from the command (ours: the launch's process start; TRL:
  its process's spawn), model loading, engine start and the final save included on both
  sides; both stop at the first optimizer step that ends past T, and samples/s divides by the
  actual wall time.

- ours: `agent-r1-async launch` (configs/default.yaml: vLLM CPU actor, async learner,
  max_staleness 2) with `model.init_from` = the warm start and `launch.max_wall_time_s` = T;
  trained samples = episodes in the learner's batches (metrics.jsonl).
- ours-sync (ablation: the async design off, same engine): ours with `buffer.max_staleness=0`
  (configs/sync.yaml's setting: the learner trains only on its current version's data).
- ours-hf (ablation: TRL's generation engine, our design): ours with `engine.backend=hf`
  (transformers `generate`, as TRL uses), still async.
  ours / ours-sync isolates the async design, ours / ours-hf the engine, ours-hf / TRL the
  design with the same kind of engine, ours / ours-token the credit.
- ours-token (ablation: TRL's credit): ours with `algorithm.credit=token`: each episode's
  whole return (process rewards summed in) on every token, the one scalar per completion TRL's
  reward function gives it, instead of our step-level credit.
- TRL: `GRPOTrainer` (its own transformers generation; synchronous: generate, then train);
  a callback stops it at T; trained samples = optimizer steps × 16 completions. Its setup is
  `--trl-setup`'s fastest, else the base: bf16 as `precision.py` resolves it, checkpointing
  with the memory savers, plain `generate`, 16 completions generated per optimizer step.
- `--trl-setup-sweep`: TRL alone, `--setup-steps` optimizer steps per setup, steps 2.. timed:
  each of `TRL_FACTORS` (bf16 or fp32; checkpointing on or off; transformers' continuous
  batching or plain `generate`; a generation batch of 16 or 32, the second feeding two
  optimizer steps) one at a time from the base, then the combination of the faster levels;
  a table of seconds per step and peak memory, and ROOT/trl_setup.json with the fastest
  (run again with the same `--root`, a stopped sweep skips the setups that file holds).
  (`use_cache` is not a factor: TRL turns checkpointing off while it generates, so
  generation always uses its KV cache.)
- `--equal-updates`: after each seed's timed arms, each of our arms once more for exactly the
  update count TRL reached in its budget (no time limit), evaluated the same way: held-out
  return at equal updates beside equal time.
- held-out: `evaluate()` of each final model on the first `--eval-tasks` dev tasks with the
  vLLM engine (T = 1, one sample per task): `mean_return`. The shared start is
  evaluated once (seed 0) for reference.
- memory (`--memory-savers`, on by default): our whole-layer activation checkpointing
  (`learner.gradient_checkpointing`, `learner.checkpoint_recompute=all`) and chunked LM head
  (`learner.head_chunk_tokens=512`), so a run stays near 7 GB on the shared box; TRL's
  `gradient_checkpointing` as its setup says (the base setup: on with the memory savers).
The arms of one seed run one after the other, in an order rotated by seed (load drifts hit
every arm). Prints per run, then per arm the mean ± a 95 % t interval over seeds and the
per-seed ratios; one held-out evaluation of 100 tasks with one sample each has a standard
error of ~0.05 on the success rate (printed per run), so seed-to-seed spread is reported,
not hidden. Rows also go to <root>/results.jsonl as they finish, each with its machine (CPU,
AMX or not) and date; run again with the same `--root`, the bench skips the runs that file holds
and goes on, so the seeds of one table can run on different days (`--seeds 0`, then `--seeds 0
1`, ...: the summary covers every seed named; on a fresh checkout, copy the committed
results.jsonl into the new root first). The arms of one seed must share a machine (their
ratios are paired within the seed): a seed begun on another CPU is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.children import next_message
from bench.stats import PeakRSS, binomial_se, fmt_ci, load_line, machine_line, mean_ci, utc_date

REPO = Path(__file__).resolve().parents[1]

CONFIG = REPO / "configs" / "default.yaml"
GROUP, PROMPTS_PER_STEP = 8, 2
TRL_HINT = "TRL is not installed: .venv/bin/pip install -e '.[peer]' (trl==1.16.0)"
OUR_ARMS = {
    "ours": [],  # async (max_staleness 2), vLLM actor
    "ours-sync": ["buffer.max_staleness=0"],  # the async design off, same engine
    "ours-hf": ["engine.backend=hf"],  # TRL's kind of generation engine, our async design
    # TRL's credit: each episode's whole return (process rewards summed in, as TRL's reward
    # function replays them) on every token, instead of our step-level credit
    "ours-token": ["algorithm.credit=token"],
}
ARMS = [*OUR_ARMS, "trl"]
OUR_SAVERS = ["learner.gradient_checkpointing=true", "learner.checkpoint_recompute=all",
              "learner.head_chunk_tokens=512"]


def common_overrides(seed: int) -> list[str]:
    return [f"algorithm.group_size={GROUP}",
            f"algorithm.batch_groups={PROMPTS_PER_STEP}", "algorithm.kl_coef=0.0",
            f"launch.seed={seed}", f"actors.seed={seed}", f"learner.seed={seed}",
            "logging.wandb_mode=disabled"]


def bench_config(seed: int) -> Any:
    from agent_r1_async.config import load_config

    return load_config(CONFIG, common_overrides(seed))


def shared_start() -> str:
    """The default launch's warm-start checkpoint (multi-turn demos; cached after the first)."""
    from agent_r1_async.config import load_config
    from agent_r1_async.run.warm_start import warm_start

    return warm_start(load_config(CONFIG, ["logging.wandb_mode=disabled"]), print)


def held_out(model_path: str, seed: int, n: int) -> dict[str, float]:
    """evaluate()'s summary (mean_return, success, ...) of `model_path` on n dev tasks."""
    from agent_r1_async.run.evaluate import evaluate

    cfg = bench_config(seed)
    return evaluate(cfg, cfg.env.eval_split, n, model_path=model_path)


# ---------------------------------------------------------------- ours


def launch_metrics(run_dir: Path) -> dict[str, float]:
    """Trained episodes, updates, mean staleness and learner idle fraction of a launch."""
    samples = updates = stale = idle = 0.0
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "learner/episodes" not in rec:
            continue
        samples += float(rec["learner/episodes"])  # episodes in each update's batch
        updates += 1
        stale += float(rec.get("staleness/mean", 0.0))  # of the batch's tokens, in versions
        idle += float(rec.get("learner/idle_ratio", 0.0))  # waiting for data / update time
    n = max(updates, 1.0)
    return {"samples": samples, "updates": updates, "staleness": stale / n, "idle": idle / n}


def run_ours(arm: str, seed: int, minutes: float, root: str, start: str,
             savers: bool, updates: int | None = None) -> dict[str, Any]:
    """One budgeted launch of `arm`: trained samples/s, final checkpoint dir, its metrics.
    `updates`: a launch of exactly that many updates instead, with no time budget (the
    equal-update runs)."""
    run_root = os.path.join(root, f"{arm}-s{seed}" + (f"-u{updates}" if updates else ""))
    limit = ([f"learner.total_updates={updates}", "launch.max_wall_time_s=0"] if updates else
             [f"launch.max_wall_time_s={minutes * 60}", "learner.total_updates=1000000"])
    sets = [*common_overrides(seed), *OUR_ARMS[arm], *(OUR_SAVERS if savers else []),
            f"model.init_from={start}", "launch.warm_start=false",
            "eval.in_launch=false", *limit, f"launch.run_root={run_root}",
            "learner.checkpoint_every=1000000"]
    cmd = [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config", str(CONFIG)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=REPO, timeout=minutes * 60 + 900 + 600 * bool(updates),
                   stdout=sys.stderr)
    wall = time.monotonic() - t0
    (run_dir,) = [p for p in Path(run_root).iterdir() if p.is_dir()]
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(str(run_dir))
    if ckpt is None:
        raise RuntimeError(f"{run_dir}: no checkpoint after the budget")
    m = launch_metrics(run_dir)
    # the budget can overrun by the update in progress: divide by the actual wall time
    return {"rate": m["samples"] / wall, "model_dir": ckpt, "wall_s": wall, **m}


# ---------------------------------------------------------------- TRL

# SmolLM2's ChatML template plus what TRL's tool loop needs, rendered the way our env and
# context builder do: a tool result is a `user` turn of `<tool_response>` blocks (one per call),
# an assistant turn with calls renders them as `<tool_call>{json}</tool_call>`. The template
# ignores `tools=`: like our context builder for a template without tool support, the prompt
# carries the env's tool schemas as a text block in the system message (`trl_prompt`).
# tests/unit/bench/test_bench_vs_trl.py checks a whole episode renders to our context's exact ids.
CHATML_TOOLS = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}"
    "{{ '<|im_start|>user\\n' }}{%- else -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}"
    "{{ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] -%}"
    "{{ '<tool_call>' + (call['function'] | tojson) + '</tool_call>' }}"
    "{%- endfor -%}{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


class CalculatorTools:
    """TRL `environment_factory` class: the env's calculator as a tool method."""

    def reset(self, **_: Any) -> None:
        return None

    async def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / and parentheses.

        Args:
            expression: The expression, e.g. 12*(3+4).

        Returns:
            The value, or an error message.
        """
        from agent_r1_async.envs.arithmetic import Calculator

        return await Calculator().call(expression)  # the env's own tool, same answers


def trl_prompt(obs: Any) -> list[dict[str, Any]]:
    """The conversational prompt of a reset observation as our context builder shows it to
    SmolLM2 (ChatML has no tool support: the schemas go into the system message)."""
    from agent_r1_async.actors.context import with_tools_text

    messages = [dict(m) for m in obs.messages]
    return [dict(m) for m in with_tools_text(messages, obs.tools)] if obs.tools else messages


def arithmetic_dataset(seed: int) -> tuple[Any, Any]:
    """(datasets.Dataset of conversational prompts + task index, the env spec)."""
    from datasets import Dataset

    from agent_r1_async.envs.registry import get_env_spec

    spec = get_env_spec(bench_config(seed).env)
    rows = []
    for i, task in enumerate(spec.tasks("train")):
        obs = asyncio.run(spec.make().reset(task))
        rows.append({"prompt": trl_prompt(obs), "task_index": i})
    return Dataset.from_list(rows).shuffle(seed=seed), spec


def action_texts(completion: list[dict[str, Any]]) -> list[str]:
    """The assistant turns of a TRL multi-turn completion as the action texts our env reads."""
    from agent_r1_async.envs.toolenv import ToolCall, tool_call_text

    texts = []
    for msg in completion:
        if msg.get("role") != "assistant":
            continue
        calls = [tool_call_text(ToolCall(c["function"]["name"], c["function"]["arguments"]))
                 for c in msg.get("tool_calls") or []]
        texts.append((msg.get("content") or "") + "".join(calls))
    return texts


def env_return(spec: Any, task: Any, actions: list[str]) -> float:
    """The env's undiscounted return of an episode made of `actions` (replayed in order)."""
    async def replay() -> float:
        env = spec.make()
        await env.reset(task)
        total = 0.0
        for text in actions:
            res = await env.step(text)
            total += res.reward
            if res.done:
                return total + res.outcome_reward
        return total  # cut off before it answered: no outcome, as a truncated episode

    return asyncio.run(replay())


def run_trl(seed: int, minutes: float, root: str, start: str, setup: dict[str, Any],
            t0: float, vllm: bool = False, max_steps: int = 0) -> dict[str, Any]:
    """One budgeted GRPOTrainer run in TRL setup `setup` (`trl_setup`): trained samples/s,
    saved model dir, optimizer steps and each step's end time. `t0` is `time.time()` when its
    process was asked for (the parent's spawn): the budget and the wall time count from there,
    as a launch's count from its command. `max_steps` > 0 stops there (the setup sweep)."""
    deadline = t0 + minutes * 60
    step_ends: list[float] = []
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from agent_r1_async.models import load_causal_lm, load_tokenizer
    from agent_r1_async.precision import learner_bf16

    cfg = bench_config(seed)
    dataset, spec = arithmetic_dataset(seed)
    tasks = spec.tasks("train")

    def reward(prompts: list, completions: list, task_index: list[int], **_: Any) -> list[float]:
        return [env_return(spec, tasks[i], action_texts(c))
                for c, i in zip(completions, task_index, strict=True)]

    class Budget(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            step_ends.append(time.time())
            if time.time() >= deadline:
                control.should_training_stop = True
            return control

    tokenizer = load_tokenizer(start)
    tokenizer.chat_template = CHATML_TOOLS
    tokenizer.response_template = qwen3_template  # parses `<tool_call>{json}</tool_call>`
    out = os.path.join(root, f"trl-s{seed}")
    args = GRPOConfig(
        output_dir=out, seed=seed, use_cpu=True,
        bf16=(learner_bf16(cfg.learner, model=cfg.model.name_or_path) if setup["bf16"] is None
              else setup["bf16"]),
        learning_rate=cfg.learner.lr,
        beta=0.0, epsilon=cfg.algorithm.eps_low, epsilon_high=cfg.algorithm.eps_high,
        loss_type="dapo", scale_rewards="group", max_grad_norm=cfg.learner.grad_clip,
        num_generations=GROUP, per_device_train_batch_size=GROUP,
        gradient_accumulation_steps=PROMPTS_PER_STEP,
        # ours: engine.max_new_tokens per turn, env.max_turns turns; TRL's budget covers the
        # whole multi-turn completion (tool results included)
        max_completion_length=cfg.engine.max_new_tokens * cfg.env.max_turns,
        max_tool_calling_iterations=cfg.env.max_turns - 1,
        temperature=cfg.engine.temperature, top_p=1.0, max_steps=max_steps or 10**6,
        logging_steps=1, save_strategy="no", report_to=[], lr_scheduler_type="constant",
        warmup_steps=0, gradient_checkpointing=setup["gradient_checkpointing"],
        use_transformers_continuous_batching=setup["continuous_batching"],
        generation_batch_size=setup["generation_batch_size"],
        **(TRL_VLLM if vllm else {}),
    )
    trainer = GRPOTrainer(model=load_causal_lm(start), reward_funcs=reward, args=args,
                          train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=CalculatorTools, callbacks=[Budget()])
    trainer.train()  # stops at the first step end past the budget
    samples = trainer.state.global_step * GROUP * PROMPTS_PER_STEP
    model_dir = os.path.join(out, "final")
    trainer.save_model(model_dir)
    load_tokenizer(start).save_pretrained(model_dir)  # the original template, for evaluate()
    wall = time.time() - t0  # the final save counts, as a launch's final checkpoint does
    return {"rate": samples / wall, "model_dir": model_dir, "wall_s": wall,
            "samples": float(samples), "updates": float(trainer.state.global_step),
            "step_ends": [t - t0 for t in step_ends], "setup": setup}


TRL_VLLM: dict[str, Any] = {"use_vllm": True, "vllm_mode": "colocate",
                           "vllm_enable_sleep_mode": False}
"""`--trl-vllm`: TRL's own vLLM generation, in its process (its only mode without a server)."""


def _trl_child(q: Any, *args: Any) -> None:
    try:
        q.put(("ok", run_trl(*args)))
    except BaseException as e:  # reported to the parent, which raises it
        import traceback

        where = traceback.extract_tb(e.__traceback__)[-1]
        q.put(("error", f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})"))


def run_trl_isolated(seed: int, minutes: float, root: str, start: str,
                     setup: dict[str, Any], vllm: bool = False,
                     max_steps: int = 0) -> dict[str, Any]:
    """`run_trl` in a spawned process: its model, optimizer and generation memory go away
    with it instead of staying in this process for the arms after it (2026-11-23: ~3 GB
    left behind, and the next launches were OOM-killed on the shared box)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_trl_child,
                       args=(q, seed, minutes, root, start, setup, time.time(), vllm,
                             max_steps))
    proc.start()
    try:
        status, value = next_message(q, proc, minutes * 60 + 3600, "the TRL process")
    finally:
        proc.join(120)
    if status != "ok":
        raise RuntimeError(f"TRL run failed: {value}")
    return value


# ---------------------------------------------------------------- TRL's fastest setup

TRL_FACTORS: dict[str, tuple[Any, ...]] = {
    "bf16": (True, False),  # autocast over fp32 master weights, or fp32
    "gradient_checkpointing": (True, False),  # TRL turns it off while it generates
    "continuous_batching": (False, True),  # transformers' paged continuous batching
    "generation_batch_size": (16, 32),  # 32: one generation feeds two optimizer steps
}
"""What the setup sweep varies: TRL's own speed settings on CPU (`GRPOConfig` fields
`bf16`, `gradient_checkpointing`, `use_transformers_continuous_batching`,
`generation_batch_size`)."""


SETUP_STEP_MINUTES = 10
"""A setup-sweep run's time budget per optimizer step: above any step measured here (26-255 s
in the setup sweep), so `--setup-steps` ends the run, while the wait for it stays bounded."""


def trl_base_setup(savers: bool) -> dict[str, Any]:
    """The setup the bench gave TRL before any sweep: bf16 as `precision.py` resolves it for
    our learner (None), checkpointing with the memory savers, plain `generate`, one generation
    batch (16 completions) per optimizer step."""
    return {"bf16": None, "gradient_checkpointing": savers, "continuous_batching": False,
            "generation_batch_size": GROUP * PROMPTS_PER_STEP}


def setup_name(setup: dict[str, Any]) -> str:
    bf16 = {None: "bf16 auto", True: "bf16", False: "fp32"}[setup["bf16"]]
    return (f"{bf16}, checkpointing {'on' if setup['gradient_checkpointing'] else 'off'}, "
            f"{'continuous batching' if setup['continuous_batching'] else 'generate'}, "
            f"generation batch {setup['generation_batch_size']}")


def one_factor_setups(base: dict[str, Any]) -> list[dict[str, Any]]:
    """`base`, then each factor's other levels one at a time from it."""
    out = [dict(base)]
    for key, levels in TRL_FACTORS.items():
        out += [{**base, key: level} for level in levels if level != base[key]]
    return out


def seconds_per_step(step_ends: list[float]) -> float:
    """Mean seconds of an optimizer step after the first (which carries the model load and the
    first generation): (last end - first end) / (steps - 1). An odd step count keeps a
    two-step generation cycle (generation batch 32) whole."""
    if len(step_ends) < 2:
        raise ValueError(f"{len(step_ends)} steps: need ≥ 2")
    return (step_ends[-1] - step_ends[0]) / (len(step_ends) - 1)


def combined_setup(base: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each factor at its faster level, measured one at a time against `base` (ties: base's)."""
    step_s = {json.dumps(r["setup"], sort_keys=True): r["step_s"] for r in rows}
    combined = dict(base)
    for key in TRL_FACTORS:
        best = step_s[json.dumps(base, sort_keys=True)]
        for r in rows:
            varied = {k for k in TRL_FACTORS if r["setup"][k] != base[k]}
            if varied == {key} and r["step_s"] < best:
                best, combined[key] = r["step_s"], r["setup"][key]
    return combined


def done_setups(path: Path, machine: str) -> list[dict[str, Any]]:
    """The setups a stopped sweep measured already (PATH's rows), so that a sweep run again
    with the same `--root` goes on where it stopped. The setups are compared with each other,
    so they must share a machine: rows from another CPU are refused (rows without a machine
    are taken as this one's)."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"]
    one_machine(path, rows, machine, lambda r: f"{setup_name(r['setup'])} was measured",
                "a sweep's setups must share one. Sweep under another --root.")
    return rows


def print_setup_row(r: dict[str, Any], note: str = "") -> None:
    print(f"{setup_name(r['setup']):72} {r['step_s']:>7.1f} "
          f"{GROUP * PROMPTS_PER_STEP / r['step_s']:>9.3f} {r['peak_rss_gb']:>7.1f} "
          f"{r['load_before']:>4.1f}→{r['load_after']:<4.1f} {note}".rstrip(), flush=True)


def trl_setup_sweep(args: argparse.Namespace, root: str, start: str) -> dict[str, Any]:
    """TRL alone, `--setup-steps` optimizer steps per setup (seed 0): each factor one at a time
    from the base setup, then the combination of the faster levels; the fastest measured setup
    by seconds per step. Written to ROOT/trl_setup.json as it goes; a sweep stopped and run
    again with the same `--root` skips the setups that file holds."""
    base = trl_base_setup(args.memory_savers)
    cfg = bench_config(0)
    from agent_r1_async.precision import learner_bf16

    base["bf16"] = learner_bf16(cfg.learner, model=cfg.model.name_or_path)  # what auto gave TRL
    path = Path(root) / "trl_setup.json"
    here = machine_line()
    rows = done_setups(path, here)
    print(f"{'setup':72} {'s/step':>7} {'samples/s':>9} {'peak GB':>7} {'load':>9}", flush=True)
    for r in rows:
        print_setup_row(r, "(done before)")

    def measure(setup: dict[str, Any]) -> None:
        if any(r["setup"] == setup for r in rows):
            return
        load_before = os.getloadavg()[0]
        with PeakRSS() as mem:
            r = run_trl_isolated(0, SETUP_STEP_MINUTES * args.setup_steps, root, start, setup,
                                 args.trl_vllm, args.setup_steps)
        step_s = seconds_per_step(r["step_ends"])
        rows.append({"setup": setup, "step_s": step_s, "step_ends": r["step_ends"],
                     "peak_rss_gb": mem.peak_gb, "load_before": load_before,
                     "load_after": os.getloadavg()[0], "machine": here, "date": utc_date()})
        path.write_text(json.dumps({"rows": rows}, indent=1))
        print_setup_row(rows[-1])

    for setup in one_factor_setups(base):
        measure(setup)
    measure(combined_setup(base, rows))
    fastest = min(rows, key=lambda r: r["step_s"])
    base_s = next(r["step_s"] for r in rows if r["setup"] == base)
    result = {"rows": rows, "fastest": fastest["setup"], "base": base,
              "speedup_vs_base": base_s / fastest["step_s"], "load": load_line()}
    path.write_text(json.dumps(result, indent=1))
    print(f"fastest: {setup_name(fastest['setup'])}: {fastest['step_s']:.1f} s/step, "
          f"{base_s / fastest['step_s']:.2f}× the base setup's; {path}", flush=True)
    return result


# ---------------------------------------------------------------- main


def precision_line() -> str:
    from agent_r1_async.precision import engine_dtype, learner_bf16

    cfg = bench_config(0)
    model = cfg.model.name_or_path
    learner = "bf16 autocast" if learner_bf16(cfg.learner, model=model) else "fp32"
    return f"learners {learner}, our engine {engine_dtype(cfg.engine, model=model)}"


def arm_order(arms: list[str], seed_index: int) -> list[str]:
    """The arms of one seed, rotated by the seed's index: no arm always runs first."""
    k = seed_index % len(arms)
    return [*arms[k:], *arms[:k]]


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Per arm mean ± 95 % t interval over seeds; per-seed ratios of paired arms."""
    out = [f"{'arm':22} {'samples/s':>24} {'held-out return':>24} {'success':>24}"]
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], {})[r["seed"]] = r
    for arm, runs in by_arm.items():
        vals = list(runs.values())
        out.append(f"{arm:22} {fmt_ci([r['rate'] for r in vals]):>24} "
                   f"{fmt_ci([r['return'] for r in vals]):>24} "
                   f"{fmt_ci([r['success'] for r in vals]):>24}")
    pairs = [("ours", "trl"), ("ours-sync", "trl"), ("ours-hf", "trl"), ("ours-token", "trl"),
             ("ours", "ours-sync"), ("ours", "ours-hf"), ("ours", "ours-token"),
             *((f"{a}@trl-updates", "trl") for a in OUR_ARMS)]
    for a, b in pairs:
        seeds = sorted(set(by_arm.get(a, {})) & set(by_arm.get(b, {})))
        if not seeds:
            continue
        diff = [by_arm[a][s]["return"] - by_arm[b][s]["return"] for s in seeds]
        returns = (f"held-out return {fmt_ci(diff)} (per seed "
                   f"{', '.join(f'{x:+.3f}' for x in diff)})")
        if a.endswith("@trl-updates"):  # equal updates: the rate is not comparable
            ups = ", ".join(f"{by_arm[b][s]['updates']:.0f}" for s in seeds)
            out.append(f"{a} − {b}, at TRL's update counts ({ups}): {returns}")
            continue
        ratio = [by_arm[a][s]["rate"] / by_arm[b][s]["rate"] for s in seeds]
        m, h = mean_ci(ratio)
        out.append(f"{a} / {b}: samples/s {m:.2f}× ± {h:.2f} (per seed "
                   f"{', '.join(f'{x:.2f}' for x in ratio)}); {returns}")
    return out


def trl_setup(args: argparse.Namespace) -> dict[str, Any]:
    """The setup TRL's arm runs: `--trl-setup`'s fastest (a setup sweep's JSON), else the base."""
    if args.trl_setup:
        return dict(json.loads(Path(args.trl_setup).read_text())["fastest"])
    return trl_base_setup(args.memory_savers)


def run_arm(arm: str, seed: int, args: argparse.Namespace, root: str,
            start: str, updates: int | None = None) -> dict[str, Any]:
    """One budgeted run of `arm` and the held-out evaluation of its final weights; `updates`:
    one of our arms for exactly that many updates instead (arm name `ARM@trl-updates`)."""
    load_before = os.getloadavg()[0]
    with PeakRSS() as mem:
        if arm == "trl":
            r = run_trl_isolated(seed, args.minutes, root, start, trl_setup(args),
                                 args.trl_vllm)
        else:
            r = run_ours(arm, seed, args.minutes, root, start, args.memory_savers, updates)
    ev = held_out(r["model_dir"], seed, args.eval_tasks)
    return {"arm": arm_name(arm, updates), "seed": seed, **r, "return": float(ev["mean_return"]),
            "success": float(ev.get("success", 0.0)), "peak_rss_gb": mem.peak_gb,
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "machine": machine_line(),
            "date": utc_date()}


def arm_name(arm: str, updates: int | None) -> str:
    """A run's name in the rows: `ARM@trl-updates` for one of our arms run for TRL's update
    count, else the arm."""
    return f"{arm}@trl-updates" if updates else arm


def done_rows(root: str, seeds: list[int], machine: str) -> list[dict[str, Any]]:
    """The rows ROOT/results.jsonl holds already for `seeds` (a run stopped and started again
    with the same `--root` goes on where it stopped). A seed's arms are compared with each
    other, so they must all run on one machine: a seed begun on another CPU is refused."""
    path = Path(root) / "results.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["seed"] in seeds]
    one_machine(path, rows, machine, lambda r: f"seed {r['seed']} began",
                "its arms must share one. Run it under another --root, or leave that seed out "
                "of --seeds.")
    return rows


def one_machine(path: Path, rows: list[dict[str, Any]], machine: str,
                what: Callable[[dict[str, Any]], str], advice: str) -> None:
    """Refuse rows of PATH from another machine than `machine` (rows without one are taken
    as this machine's): rows compared with each other must share a CPU."""
    for r in rows:
        if r.get("machine", machine) != machine:
            raise SystemExit(f"{path}: {what(r)} on another machine ({r['machine']}; this one: "
                             f"{machine}); {advice}")


def print_row(r: dict[str, Any], eval_tasks: int, note: str = "") -> None:
    print(f"{r['arm']:22} {r['seed']:>4} {r['rate']:>9.3f} {r['return']:>7.3f} "
          f"{r['success']:>7.2f} {binomial_se(r['success'], eval_tasks):>6.3f} "
          f"{r['updates']:>7.0f} {r.get('staleness', 0.0):>5.2f} "
          f"{r.get('idle', 0.0):>5.2f} {r['wall_s']:>6.0f} {r['peak_rss_gb']:>7.1f} "
          f"{r['load_before']:>4.1f}→{r['load_after']:<4.1f} {note}".rstrip(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=ARMS)
    ap.add_argument("--eval-tasks", type=int, default=100)
    ap.add_argument("--memory-savers", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--trl-vllm", action="store_true",
                    help="TRL generates with vLLM in colocate mode instead of transformers")
    ap.add_argument("--root", default="", help="where runs go (default: a temp dir)")
    ap.add_argument("--skip-start-eval", action="store_true",
                    help="do not evaluate the shared start (it does not change between runs)")
    ap.add_argument("--trl-setup-sweep", action="store_true",
                    help="measure TRL's speed settings (TRL_FACTORS) and stop: ROOT/trl_setup.json")
    ap.add_argument("--setup-steps", type=int, default=5,
                    help="--trl-setup-sweep: optimizer steps per setup (odd: whole cycles)")
    ap.add_argument("--trl-setup", default="",
                    help="a --trl-setup-sweep JSON: TRL's arm runs its fastest setup")
    ap.add_argument("--equal-updates", action="store_true",
                    help="after each seed's timed arms, each of our arms again for exactly "
                         "TRL's update count, evaluated the same way")
    args = ap.parse_args()
    arms = list(dict.fromkeys(args.arms))
    if "trl" in arms and importlib.util.find_spec("trl") is None:
        print(TRL_HINT)
        arms.remove("trl")
        if not arms:
            return
    root = args.root or tempfile.mkdtemp(prefix="bench-vs-trl-")
    start = shared_start()
    if args.trl_setup_sweep:
        if "trl" not in arms:
            raise SystemExit(TRL_HINT)
        print(f"## TRL's speed settings: {args.setup_steps} GRPO steps each (16 completions a "
              f"step), seed 0, steps 2..{args.setup_steps} timed; {load_line()}", flush=True)
        trl_setup_sweep(args, root, start)
        return
    here = machine_line()
    print(f"## vs TRL GRPOTrainer + ablations: warm-started SmolLM2-135M-Instruct, arithmetic (up "
          f"to 3 turns), {args.minutes:g} min budget, seeds {args.seeds}, arms {arms}, held-out "
          f"{args.eval_tasks} dev tasks, our memory savers {args.memory_savers} (whole-layer "
          f"recompute), {precision_line()}; TRL: {setup_name(trl_setup(args))}; "
          f"{here}; {load_line()}", flush=True)
    if not args.skip_start_eval:
        ev = held_out(start, 0, args.eval_tasks)
        p = float(ev.get("success", 0.0))
        print(f"start: held-out return {ev['mean_return']:.3f}, success {p:.2f} (binomial SE "
              f"{binomial_se(p, args.eval_tasks):.3f})", flush=True)
    print(f"{'arm':22} {'seed':>4} {'samples/s':>9} {'return':>7} {'success':>7} {'SE':>6} "
          f"{'updates':>7} {'stale':>5} {'idle':>5} {'wall s':>6} {'peak GB':>7} {'load':>9}",
          flush=True)
    rows = done_rows(root, args.seeds, here)
    for r in rows:
        print_row(r, args.eval_tasks, "(done before)")
    for i, seed in enumerate(args.seeds):
        done = {r["arm"]: r for r in rows if r["seed"] == seed}
        runs: list[tuple[str, int | None]] = [(arm, None) for arm in arm_order(arms, i)]
        for arm, updates in runs:  # one at a time: they would share the 2 cores
            r = done.get(arm_name(arm, updates))
            if r is None:
                try:
                    r = run_arm(arm, seed, args, root, start, updates)
                except Exception as e:  # one failed run must not lose the others' numbers
                    print(f"{arm:22} {seed:>4} FAILED: {type(e).__name__}: {e}", flush=True)
                    continue
                rows.append(r)
                with open(os.path.join(root, "results.jsonl"), "a") as f:
                    f.write(json.dumps(r) + "\n")
                print_row(r, args.eval_tasks)
            if arm == "trl" and args.equal_updates:
                runs += [(a, int(r["updates"])) for a in arms if a != "trl"]
    for line in summarize(rows):
        print(line)
    print(f"(runs under {root}; {load_line()})")


if __name__ == "__main__":
    main()

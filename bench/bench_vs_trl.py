"""Side by side with TRL's GRPOTrainer: trained samples/s and held-out return after T minutes.

    .venv/bin/python bench/bench_vs_trl.py --minutes 8 --seeds 0 1 2       # ~75 minutes
    .venv/bin/python bench/bench_vs_trl.py --side ours --minutes 2 --seeds 0 --eval-tasks 8  # smoke

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
  sampling T = 1, 96 new tokens a turn (TRL: 288 for the whole completion), fp32 on CPU, the
  same seeds;
- the wall-clock budget T, counted from process start (model loading and engine start count);
  both stop at the first optimizer step that ends past T, and samples/s divides by the actual
  wall time.

- ours: `agent-r1-async launch` (configs/default.yaml: vLLM CPU actor, async learner,
  max_staleness 2) with `model.init_from` = the warm start and `launch.max_wall_time_s` = T;
  trained samples = episodes in the learner's batches (metrics.jsonl).
- TRL: `GRPOTrainer` (its own transformers generation; synchronous: generate, then train);
  a callback stops it at T; trained samples = optimizer steps × 16 completions.
- held-out: `evaluate()` of each final model on the first `--eval-tasks` dev tasks with the
  vLLM engine (T = 1, one sample per task): `mean_return`. The shared start is
  evaluated once (seed 0) for reference.
Prints per seed and the median over seeds: samples/s, held-out return, and ours / TRL.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIG = REPO / "configs" / "default.yaml"
GROUP, PROMPTS_PER_STEP = 8, 2
TRL_HINT = "TRL is not installed: .venv/bin/pip install -e '.[peer]' (trl==1.16.0)"


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


def held_out(model_path: str, seed: int, n: int) -> float:
    from agent_r1_async.run.evaluate import evaluate

    cfg = bench_config(seed)
    return float(evaluate(cfg, cfg.env.eval_split, n, model_path=model_path)["mean_return"])


# ---------------------------------------------------------------- ours


def run_ours(seed: int, minutes: float, root: str, start: str) -> tuple[float, str]:
    """(trained samples/s, final checkpoint dir) of one budgeted launch."""
    run_root = os.path.join(root, f"ours-s{seed}")
    sets = [*common_overrides(seed), f"model.init_from={start}", "launch.warm_start=false",
            "eval.in_launch=false", f"launch.max_wall_time_s={minutes * 60}",
            "learner.total_updates=1000000", f"launch.run_root={run_root}",
            "learner.checkpoint_every=1000000"]
    cmd = [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config", str(CONFIG)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=REPO, timeout=minutes * 60 + 900, stdout=sys.stderr)
    wall = time.monotonic() - t0
    (run_dir,) = [p for p in Path(run_root).iterdir() if p.is_dir()]
    samples = 0.0
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        samples += float(rec.get("learner/episodes", 0.0))  # episodes in each update's batch
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(str(run_dir))
    if ckpt is None:
        raise RuntimeError(f"{run_dir}: no checkpoint after the budget")
    return samples / wall, ckpt  # the budget can overrun by the update in progress


# ---------------------------------------------------------------- TRL

# SmolLM2's ChatML template plus what TRL's tool loop needs, rendered the way our env and
# context builder do: a tool result is a `user` turn of `<tool_response>` blocks (one per call),
# an assistant turn with calls renders them as `<tool_call>{json}</tool_call>`, tool schemas are
# not added to the prompt (the env's system prompt already describes the calculator).
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


def arithmetic_dataset(seed: int) -> tuple[Any, Any]:
    """(datasets.Dataset of conversational prompts + task index, the env spec)."""
    from datasets import Dataset

    from agent_r1_async.envs.registry import get_env_spec

    spec = get_env_spec(bench_config(seed).env)
    rows = []
    for i, task in enumerate(spec.tasks("train")):
        obs = asyncio.run(spec.make().reset(task))
        rows.append({"prompt": [dict(m) for m in obs.messages], "task_index": i})
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


def run_trl(seed: int, minutes: float, root: str, start: str) -> tuple[float, str]:
    """(trained samples/s, saved model dir) of one budgeted GRPOTrainer run."""
    t0 = time.monotonic()
    deadline = t0 + minutes * 60
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from agent_r1_async.models import load_causal_lm, load_tokenizer

    cfg = bench_config(seed)
    dataset, spec = arithmetic_dataset(seed)
    tasks = spec.tasks("train")

    def reward(prompts: list, completions: list, task_index: list[int], **_: Any) -> list[float]:
        return [env_return(spec, tasks[i], action_texts(c))
                for c, i in zip(completions, task_index, strict=True)]

    class Budget(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if time.monotonic() >= deadline:
                control.should_training_stop = True
            return control

    tokenizer = load_tokenizer(start)
    tokenizer.chat_template = CHATML_TOOLS
    tokenizer.response_template = qwen3_template  # parses `<tool_call>{json}</tool_call>`
    out = os.path.join(root, f"trl-s{seed}")
    args = GRPOConfig(
        output_dir=out, seed=seed, use_cpu=True, bf16=False, learning_rate=cfg.learner.lr,
        beta=0.0, epsilon=cfg.algorithm.eps_low, epsilon_high=cfg.algorithm.eps_high,
        loss_type="dapo", scale_rewards="group", max_grad_norm=cfg.learner.grad_clip,
        num_generations=GROUP, per_device_train_batch_size=GROUP,
        gradient_accumulation_steps=PROMPTS_PER_STEP,
        # ours: engine.max_new_tokens per turn, env.max_turns turns; TRL's budget covers the
        # whole multi-turn completion (tool results included)
        max_completion_length=cfg.engine.max_new_tokens * cfg.env.max_turns,
        max_tool_calling_iterations=cfg.env.max_turns - 1,
        temperature=cfg.engine.temperature, top_p=1.0, max_steps=10**6, logging_steps=1,
        save_strategy="no", report_to=[], lr_scheduler_type="constant", warmup_steps=0,
    )
    trainer = GRPOTrainer(model=load_causal_lm(start), reward_funcs=reward, args=args,
                          train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=CalculatorTools, callbacks=[Budget()])
    trainer.train()
    wall = time.monotonic() - t0  # stops at the first step end past the budget
    samples = trainer.state.global_step * GROUP * PROMPTS_PER_STEP
    model_dir = os.path.join(out, "final")
    trainer.save_model(model_dir)
    load_tokenizer(start).save_pretrained(model_dir)  # the original template, for evaluate()
    return samples / wall, model_dir


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--side", choices=["both", "ours", "trl"], default="both")
    ap.add_argument("--eval-tasks", type=int, default=100)
    ap.add_argument("--root", default="", help="where runs go (default: a temp dir)")
    args = ap.parse_args()
    sides = ["ours", "trl"] if args.side == "both" else [args.side]
    if "trl" in sides and importlib.util.find_spec("trl") is None:
        print(TRL_HINT)
        sides.remove("trl")
        if not sides:
            return
    root = args.root or tempfile.mkdtemp(prefix="bench-vs-trl-")
    start = shared_start()
    runners = {"ours": run_ours, "trl": run_trl}
    results: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    print(f"## vs TRL GRPOTrainer: warm-started SmolLM2-135M-Instruct, arithmetic (up to 3 turns), "
          f"{args.minutes:g} min budget, seeds {args.seeds}, held-out {args.eval_tasks} dev "
          f"tasks", flush=True)
    print(f"start: held-out return {held_out(start, 0, args.eval_tasks):.3f}", flush=True)
    print(f"{'side':6} {'seed':>4} {'samples/s':>10} {'held-out return':>15}", flush=True)
    for seed in args.seeds:
        for side in sides:  # one at a time: they would share the 2 cores
            rate, model_dir = runners[side](seed, args.minutes, root, start)
            ret = held_out(model_dir, seed, args.eval_tasks)
            results[side].append((rate, ret))
            print(f"{side:6} {seed:>4} {rate:>10.3f} {ret:>15.3f}", flush=True)
    med = statistics.median
    for side, rows in results.items():
        print(f"{side:6} {'med':>4} {med(r for r, _ in rows):>10.3f} "
              f"{med(w for _, w in rows):>15.3f}")
    if len(results) == 2:
        ours, trl = results["ours"], results["trl"]
        print(f"ours / TRL: samples/s {med(a[0] / b[0] for a, b in zip(ours, trl, strict=True)):.2f}×, "
              f"held-out return {med(a[1] for a in ours) - med(b[1] for b in trl):+.3f}")
    print(f"(runs under {root}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

"""Side by side with TRL's GRPOTrainer: samples/s and held-out reward after T minutes.

    .venv/bin/python bench/bench_vs_trl.py --minutes 20 --seeds 0 1 2       # ~2.5 hours
    .venv/bin/python bench/bench_vs_trl.py --side ours --minutes 3 --seeds 0   # smoke
    .venv/bin/python bench/bench_vs_trl.py --side trl  ...                  # needs `trl`

TRL is an optional extra: `pip install 'trl==1.16.0'` (pure Python; its dependencies —
accelerate, datasets, transformers, pandas, pyarrow — are already in the project's venv).
Without it the TRL side prints how to install it and is skipped.

Same on both sides: SmolLM2-135M-Instruct (fp32, CPU), the `arithmetic` env's train split
as prompts (system prompt + problem through the same chat template), its reward, GRPO with
8 samples per prompt and 4 prompts per optimizer step, lr 2e-6, no KL, T = 1, 96 new
tokens, the same wall-clock budget T (from process start: model loading and engine start
count; both sides stop at the first update that ends past T, and samples/s divides by the
actual wall time), the same seeds. TRL's GRPOTrainer is single-turn, so both sides run one-turn
episodes (`env.max_turns = 1`): the reward is the env's reward of that one action (outcome
1 for `<answer>N</answer>` with the right number, 0.1 for a well-formed calculator call).

- ours: `agent-r1-async launch` with configs/default.yaml (vLLM CPU actor, async learner,
  max_staleness 2) and `launch.max_wall_time_s = T`; trained samples = episodes in the
  learner's batches (metrics.jsonl).
- TRL: `GRPOTrainer` (its own transformers generation, synchronous: generate, then train);
  a callback stops it at T; trained samples = optimizer steps × 32 completions.
- Held-out: `evaluate()` of each final model on the first `--eval-tasks` tasks of the dev
  split with the same engine and sampling (T=1, one sample per task), after the budget.
Prints per seed and the median over seeds: samples/s, held-out outcome reward, and the
ratios ours / TRL.
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

MODEL = "smollm2-135m-instruct"
GROUP, PROMPTS_PER_STEP, MAX_NEW, LR = 8, 4, 96, 2e-6
TRL_HINT = "TRL is not installed: pip install 'trl==1.16.0' (or the project's [trl] extra)"


def common_overrides(seed: int) -> list[str]:
    return ["env.max_turns=1", f"algorithm.group_size={GROUP}",
            f"algorithm.batch_groups={PROMPTS_PER_STEP}", f"engine.max_new_tokens={MAX_NEW}",
            "engine.temperature=1.0", f"learner.lr={LR:.1e}", "algorithm.kl_coef=0.0",
            f"launch.seed={seed}", f"actors.seed={seed}", f"learner.seed={seed}",
            "logging.wandb_mode=disabled"]


def held_out(model_path: str, seed: int, n: int) -> float:
    from agent_r1_async.config import load_config
    from agent_r1_async.evaluate import evaluate

    cfg = load_config(REPO / "configs" / "default.yaml", common_overrides(seed))
    return float(evaluate(cfg, cfg.env.eval_split, n, model_path=model_path)["outcome_reward"])


# ---------------------------------------------------------------- ours


def run_ours(seed: int, minutes: float, root: str) -> tuple[float, str]:
    """(trained samples/s, final checkpoint dir) of one budgeted launch."""
    run_root = os.path.join(root, f"ours-s{seed}")
    sets = [*common_overrides(seed), f"launch.max_wall_time_s={minutes * 60}",
            "learner.total_updates=1000000", f"launch.run_root={run_root}",
            "learner.checkpoint_every=1000000"]
    cmd = [sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
           str(REPO / "configs" / "default.yaml")]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=REPO, timeout=minutes * 60 + 600, stdout=sys.stderr)
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


def arithmetic_dataset(seed: int) -> tuple[Any, Any]:
    """(datasets.Dataset of conversational prompts + task index, the env spec)."""
    from datasets import Dataset

    from agent_r1_async.config import EnvConfig
    from agent_r1_async.envs.registry import get_env_spec

    spec = get_env_spec(EnvConfig(name="arithmetic", max_turns=1))
    tasks = spec.tasks("train")
    rows = []
    for i, task in enumerate(tasks):
        obs = asyncio.run(spec.make().reset(task))
        msgs = [dict(m) for m in obs.messages]
        rows.append({"prompt": msgs, "task_index": i})
    return Dataset.from_list(rows).shuffle(seed=seed), spec


def env_reward(spec: Any, task: Any, text: str) -> float:
    """The env's reward of a one-turn episode whose action is `text`."""
    async def one() -> float:
        env = spec.make()
        await env.reset(task)
        res = await env.step(text)
        return res.reward + (res.outcome_reward if res.done else 0.0)

    return asyncio.run(one())


def run_trl(seed: int, minutes: float, root: str) -> tuple[float, str]:
    """(trained samples/s, saved model dir) of one budgeted GRPOTrainer run."""
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agent_r1_async.models import load_causal_lm, load_tokenizer, resolve_model

    t0 = time.monotonic()
    deadline = t0 + minutes * 60
    dataset, spec = arithmetic_dataset(seed)
    tasks = spec.tasks("train")

    def reward(prompts: list, completions: list, task_index: list[int], **_: Any) -> list[float]:
        return [env_reward(spec, tasks[i], c[0]["content"] if isinstance(c, list) else c)
                for c, i in zip(completions, task_index, strict=True)]

    class Budget(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if time.monotonic() >= deadline:
                control.should_training_stop = True
            return control

    out = os.path.join(root, f"trl-s{seed}")
    args = GRPOConfig(
        output_dir=out, seed=seed, use_cpu=True, bf16=False, learning_rate=LR, beta=0.0,
        num_generations=GROUP, per_device_train_batch_size=GROUP,
        gradient_accumulation_steps=PROMPTS_PER_STEP, max_completion_length=MAX_NEW,
        temperature=1.0, max_steps=10**6, logging_steps=1, save_strategy="no", report_to=[],
        lr_scheduler_type="constant", warmup_steps=0,
    )
    path = resolve_model(MODEL)
    trainer = GRPOTrainer(model=load_causal_lm(path), reward_funcs=reward, args=args,
                          train_dataset=dataset, processing_class=load_tokenizer(path),
                          callbacks=[Budget()])
    trainer.train()
    wall = time.monotonic() - t0  # stops at the first step end past the budget
    samples = trainer.state.global_step * GROUP * PROMPTS_PER_STEP
    model_dir = os.path.join(out, "final")
    trainer.save_model(model_dir)
    trainer.processing_class.save_pretrained(model_dir)
    return samples / wall, model_dir


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--side", choices=["both", "ours", "trl"], default="both")
    ap.add_argument("--eval-tasks", type=int, default=64)
    ap.add_argument("--root", default="", help="where runs go (default: a temp dir)")
    args = ap.parse_args()
    sides = ["ours", "trl"] if args.side == "both" else [args.side]
    if "trl" in sides and importlib.util.find_spec("trl") is None:
        print(TRL_HINT)
        sides.remove("trl")
        if not sides:
            return
    root = args.root or tempfile.mkdtemp(prefix="bench-vs-trl-")
    runners = {"ours": run_ours, "trl": run_trl}
    results: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    print(f"## vs TRL GRPOTrainer: SmolLM2-135M-Instruct, arithmetic (1 turn), "
          f"{args.minutes:g} min budget, seeds {args.seeds}, held-out {args.eval_tasks} dev tasks")
    print(f"{'side':6} {'seed':>4} {'samples/s':>10} {'held-out reward':>15}")
    for seed in args.seeds:
        for side in sides:  # one at a time: they would share the 2 cores
            rate, model_dir = runners[side](seed, args.minutes, root)
            rew = held_out(model_dir, seed, args.eval_tasks)
            results[side].append((rate, rew))
            print(f"{side:6} {seed:>4} {rate:>10.2f} {rew:>15.3f}", flush=True)
    med = statistics.median
    for side, rows in results.items():
        print(f"{side:6} {'med':>4} {med(r for r, _ in rows):>10.2f} "
              f"{med(w for _, w in rows):>15.3f}")
    if len(results) == 2:
        ours, trl = results["ours"], results["trl"]
        print(f"ours / TRL: samples/s {med(a[0] / b[0] for a, b in zip(ours, trl, strict=True)):.2f}×, "
              f"held-out reward {med(a[1] for a in ours) - med(b[1] for b in trl):+.3f}")
    print(f"(runs under {root}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()

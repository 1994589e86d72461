"""Shared-prefix group training: one learner update with flat rows against prefix-tree rows.

    .venv/bin/python -m bench.bench_shared_prefix
    .venv/bin/python -m bench.bench_shared_prefix --groups 1 --group-size 2 --repeats 1  # smoke
    .venv/bin/python -m bench.bench_shared_prefix --launches --repeats 3  # end to end, ~20 min

configs/default.yaml's learner (SmolLM2-135M-Instruct, `learner.bf16: auto`, whole-layer
recompute, micro-batches of ≤ 2,048 tokens, step packing; `learner.device=cpu`) on a batch
shaped like the default launch's: `--groups` groups (2) × `--group-size` episodes (8) of the
arithmetic env. Each group's prompt is the real first context of an oracle demonstration of its
task (system prompt with the calculator's schema + the task, SmolLM2's chat template); each
episode takes 1-3 turns of 12-34 random action tokens (members diverge at their first action
token, so the shared prefix is the prompt alone: sampled actions often share more), the tool
replies between turns those of the oracle's demonstration. Episodes go into a SampleBatch and
through the learner's own path (trainable groups, GRPO step advantages, rows, step packing).

Per repeat, in alternating order, one update each way: micro-batching + `optimize` (the default
GRPO with one epoch has no proximal pass), `learner.shared_prefix` false vs true, on one model
in one process, `--threads` torch threads (1, as a launched learner with `learner.num_cpus` 1);
the first round is a warm-up. Prints the tokens each forward computes (tree / flat: the ratio
the metrics `learner/tokens_computed` / `learner/tokens_flat` show), each side's update time
(mean ± 95 % t interval), the per-repeat time ratio tree / flat with its interval, and the load;
the same for the process's CPU seconds, steadier than wall time on a loaded machine.

`--launches`: whole default launches flat vs tree instead, end-to-end samples/s
(bench/launch_pairs.py).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from bench.stats import fmt_ci, fmt_spread, load_line, mean_ci

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = str(ROOT / "configs" / "default.yaml")


def oracle_turns(cfg: Any, tokenizer: Any, tasks: int, seed: int) -> list[tuple[list[int], list[list[int]]]]:
    """Per task: (its first context, the tool replies between its oracle's turns)."""
    from agent_r1_async.actors.context import make_context_builder
    from agent_r1_async.envs.registry import get_env_spec
    from agent_r1_async.sft.demos import oracle_demos
    from agent_r1_async.sft.train import demo_tasks

    spec = get_env_spec(cfg.env)
    demos = oracle_demos(spec, demo_tasks(spec.tasks(cfg.env.train_split), seed, 0), tokenizer,
                         make_context_builder(cfg.context, tokenizer), cfg.model.max_model_len,
                         limit=tasks)
    out = []
    for d in demos:
        replies = [nxt.context_ids[len(cur.context_ids) + len(cur.action_ids):]
                   for cur, nxt in zip(d.steps, d.steps[1:], strict=False)]
        out.append((list(d.steps[0].context_ids), [list(r) for r in replies]))
    return out


def sample_batch(prompts: list[tuple[list[int], list[list[int]]]], group_size: int,
                 vocab: int, seed: int) -> Any:
    """A SampleBatch: per prompt one group of `group_size` episodes of 1-3 turns."""
    from agent_r1_async.wire import messages as m

    rng = random.Random(seed)
    groups = []
    for g, (prompt, replies) in enumerate(prompts):
        episodes = []
        for e in range(group_size):
            eid, gid = f"e{g}-{e}", f"g{g}"
            turns, ctx, steps = rng.randint(1, 3), list(prompt), []
            for t in range(turns):
                action = [rng.randrange(3, vocab) for _ in range(rng.randint(12, 34))]
                steps.append(m.StepRecord(
                    episode_id=eid, group_id=gid, task_id=gid, actor_id="a0",
                    env_name="arithmetic", step_index=t, context_ids=list(ctx),
                    action_ids=action, behavior_logprobs=[-rng.uniform(0.1, 3.0) for _ in action],
                    policy_version=0, done=t == turns - 1))
                reply = replies[t % len(replies)] if replies else [rng.randrange(3, vocab)
                                                                   for _ in range(30)]
                ctx = ctx + action + reply
            end = m.EpisodeEnd(episode_id=eid, group_id=gid, task_id=gid, actor_id="a0",
                               env_name="arithmetic", num_steps=turns,
                               outcome_reward=float(rng.random() < 0.5), status="ok",
                               group_size=group_size)
            episodes.append(m.Episode(steps=steps, end=end))
        groups.append(m.Group(group_id=f"g{g}", task_id=f"g{g}", env_name="arithmetic",
                              episodes=episodes))
    return m.SampleBatch(groups=groups, is_weights=[1.0] * len(groups), learner_version=0)


def batch_rows(batch: Any, cfg: Any) -> list[Any]:
    """The learner's rows of a batch (learner/loop.py `_prepare`, GRPO)."""
    from agent_r1_async import returns as ret
    from agent_r1_async.learner import advantages as adv
    from agent_r1_async.learner import batching

    algo = cfg.algorithm
    groups = batching.trainable_groups(batch)
    rewards = batching.episode_rewards([g for g, _ in groups])
    returns = [[ret.discounted_returns(ep, algo.gamma) for ep in g] for g in rewards]
    advantages = adv.compute_advantages(returns, algo.name, algo.credit, algo.std_normalize)
    return batching.build_rows(groups, advantages, rewards)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="timed pairs after one warm-up")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="extra config override a.b=v")
    ap.add_argument("--launches", action="store_true",
                    help="whole launches flat vs tree: end-to-end samples/s")
    ap.add_argument("--updates", type=int, default=12, help="--launches: updates per launch")
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="--launches: the launch's config")
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench-shared-prefix",
                    help="--launches: where the launches' run directories go")
    args = ap.parse_args()
    if args.launches:
        from bench.launch_pairs import run_pairs

        run_pairs("Shared-prefix end to end", args.config,
                  {"flat": ["learner.shared_prefix=false"], "tree": ["learner.shared_prefix=true"]},
                  args.updates, args.repeats, args.run_root, args.set)
        return

    import torch

    from agent_r1_async import models
    from agent_r1_async.config import load_config
    from agent_r1_async.learner import batching
    from agent_r1_async.learner.trainer import PolicyTrainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = load_config(DEFAULT_CONFIG, ["learner.device=cpu", *args.set])
    path = models.resolve_model(cfg.model.name_or_path)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_line()}; "
          f"{args.threads} torch thread(s)")
    prompts = oracle_turns(cfg, models.load_tokenizer(path), args.groups, args.seed)
    trainer = PolicyTrainer(cfg, path)
    vocab = trainer._causal_lm().config.vocab_size
    rows = batch_rows(sample_batch(prompts, args.group_size, vocab, args.seed), cfg)
    lc = cfg.learner
    print(f"# configs/default.yaml learner: bf16 {trainer.bf16}, micro_batch_tokens "
          f"{lc.micro_batch_tokens}, pack_steps {lc.pack_steps}, gradient_checkpointing "
          f"{lc.gradient_checkpointing}; attention {trainer.attn_implementation}")

    def micro_batches(shared: bool) -> list[Any]:
        return batching.make_micro_batches(rows, lc.micro_batch_tokens, trainer.pad_id,
                                           pack=lc.pack_steps, shared_prefix=shared)

    def update(shared: bool) -> tuple[float, float]:
        """(wall, CPU) seconds of one update."""
        t0, c0 = time.perf_counter(), time.process_time()
        mbs = micro_batches(shared)
        if trainer.needs_proximal_pass(lc.ppo_epochs):
            trainer.proximal_pass(mbs)
        for _ in range(lc.ppo_epochs):
            trainer.optimize(mbs, 0)
        return time.perf_counter() - t0, time.process_time() - c0

    sides = {"flat": False, "tree": True}
    shapes = {name: micro_batches(shared) for name, shared in sides.items()}
    flat_tokens = sum(mb.flat_tokens for mb in shapes["flat"])
    prompt_lens = [len(p) for p, _ in prompts]
    print(f"# batch: {args.groups} groups × {args.group_size} episodes, {len(rows)} steps, "
          f"{sum(r.length - len(r.context_ids) for r in rows)} action tokens; prompts "
          f"{prompt_lens} tokens")
    for name, mbs in shapes.items():
        computed = sum(mb.computed_tokens for mb in mbs)
        print(f"{name}: {len(mbs)} micro-batches, {computed:,} tokens computed "
              f"({sum(mb.num_tokens for mb in mbs):,} padded), {computed / flat_tokens:.3f} of "
              f"flat's {flat_tokens:,}")
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(args.repeats + 1):
        order = list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]
        for name, shared in order:
            w, c = update(shared)
            if i > 0:
                wall[name].append(w)
                cpu[name].append(c)
        if i > 0:
            print(f"pair {i}: flat {wall['flat'][-1]:.2f} s ({cpu['flat'][-1]:.2f} CPU s), "
                  f"tree {wall['tree'][-1]:.2f} s ({cpu['tree'][-1]:.2f} CPU s); {load_line()}",
                  flush=True)
        else:
            print(f"warm-up done; {load_line()}", flush=True)
    for label, times in (("update s", wall), ("update CPU s", cpu)):
        for name, ts in times.items():
            print(f"{label}, {name}: {fmt_ci(ts, 2)}; median {fmt_spread(ts, 2)}")
        ratios = [t / f for t, f in zip(times["tree"], times["flat"], strict=True)]
        m, half = mean_ci(ratios)
        interval = (f"95 % interval [{m - half:.3f}, {m + half:.3f}]" if len(ratios) > 1
                    else "one pair: no interval")
        print(f"{label} tree / flat: {fmt_ci(ratios, 3)}; {interval}")
    print(f"# done; {load_line()}")


if __name__ == "__main__":
    main()

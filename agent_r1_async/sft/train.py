"""`agent-r1-async sft`: supervised warm start on demonstrations, in the learner's own format.

    demos  = oracle replays (or chat transcripts) as step rows (context_ids, action_ids)
    eval   = evaluate(start model, env.eval_split)                        # sft.eval_before
    repeat sft.epochs, sft.batch_episodes episodes per step:
        rows → the learner's micro-batches (length-sorted, learner.micro_batch_tokens; with
               learner.pack_steps a demonstration's chained steps share one sequence, with
               learner.shared_prefix the batch's sequences their common prefix)
        loss = token-mean cross-entropy over the action tokens of the whole step
        one AdamW step (learner betas / weight decay / grad_clip / bf16, lr = sft.lr)
    save   = the learner's checkpoint format: RUN_DIR/checkpoints/step-N + `latest`
    eval   = evaluate(checkpoint, env.eval_split)                         # sft.eval_after

Design choice: nothing here re-implements the learner. Rows are collated by
`learner.batching` (only action tokens carry loss, the eos included), log-probs come from
`PolicyTrainer.forward` (LM head only at action positions), the optimizer is the trainer's,
and the checkpoint is `learner.checkpoint.save_checkpoint` — a plain HF model directory, so
RL starts from it with `model.init_from: RUN_DIR/checkpoints/latest`. The checkpoint carries
version 0: the warm-started weights are the RL run's first policy.

Run: `agent-r1-async sft --config configs/sft.yaml [--set sft.epochs=3 ...]`.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import torch

from agent_r1_async.config import RunConfig, SftConfig
from agent_r1_async.envs.base import demo_tasks
from agent_r1_async.learner import batching, checkpoint
from agent_r1_async.learner.batching import MicroBatch
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.sft.demos import Demonstration, DemoStats, jsonl_demos, oracle_demos
from agent_r1_async.wire.delta import extends

Pair = tuple[list[int], list[int]]


# --------------------------------------------------------------------------------------
# Batching and one optimizer step
# --------------------------------------------------------------------------------------


def demo_pairs(demos: Sequence[Demonstration]) -> list[Pair]:
    """Every step of every demonstration as (context_ids, action_ids)."""
    return [(s.context_ids, s.action_ids) for d in demos for s in d.steps]


def chain_pairs(pairs: Sequence[Pair]) -> list[list[int]]:
    """Pair indices grouped into training sequences: a pair whose context begins with the
    previous pair's context + action joins its sequence (a demonstration's steps under a
    context builder that only appends), else it starts one."""
    seqs: list[list[int]] = []
    for i, (ctx, _) in enumerate(pairs):
        if seqs and extends(ctx, *pairs[seqs[-1][-1]]):
            seqs[-1].append(i)
            continue
        seqs.append([i])
    return seqs


def sft_micro_batches(
    pairs: Sequence[Pair], max_tokens: int, pad_id: int, pack: bool = False,
    shared_prefix: bool = False, rho: float = 0.0,
) -> list[MicroBatch]:
    """Rows → the learner's MicroBatches (its packing plan and collation; RL fields zeroed).

    `pack` (`learner.pack_steps`): chained pairs (`chain_pairs`) share one sequence, the last
    pair's context + action, each pair's action tokens trained at their own positions. A
    causal LM gives those tokens the same log-probs as the separate rows (their prefix is the
    same), so the loss and gradient are the unpacked rows' at a fraction of the tokens.

    `shared_prefix` (`learner.shared_prefix`): the batch's sequences that share a prefix (the
    system prompt every demonstration of an env starts with; a task's, where a batch repeats
    one) are laid out as prefix trees (learner/prefix_tree.py), the prefix computed once,
    where that costs less by the attention cost `rho` (`PolicyTrainer.attention_cost`).
    """
    seqs = chain_pairs(pairs) if pack else [[i] for i in range(len(pairs))]
    rows = [batching.Row(context_ids=ctx, action_ids=act, behavior_logprobs=[0.0] * len(act),
                         token_versions=[0] * len(act), advantage=0.0, reward=0.0,
                         sample_weight=1.0, group_index=0, episode_index=i, step_index=0,
                         ids=("", ""))
            for i, (ctx, act) in enumerate(pairs)]
    return batching.sequences_to_micro_batches(rows, seqs, max_tokens, pad_id, shared_prefix,
                                               rho)


def sft_step(trainer: PolicyTrainer, mbs: Sequence[MicroBatch]) -> dict[str, float]:
    """One optimizer step: token-mean NLL of the action tokens, accumulated over micro-batches.

    Each micro-batch's summed NLL is divided by the step's total action-token count, so the
    accumulated gradient is that of the mean over all action tokens of the step.
    """
    trainer.optimizer.zero_grad(set_to_none=True)
    action_tokens = sum(mb.num_action_tokens for mb in mbs)
    loss = 0.0
    for mb in mbs:
        logprobs = trainer.forward(mb, raw=True).logprobs  # [B, T], 0 off the action tokens
        nll = -logprobs.sum() / action_tokens
        nll.backward()
        loss += float(nll.detach())
    clip = trainer.lcfg.grad_clip if trainer.lcfg.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(trainer.trainable_parameters(), clip)
    trainer.optimizer.step()
    return {
        "loss": loss,
        "grad_norm": float(grad_norm),
        "action_tokens": float(action_tokens),
        "tokens": float(sum(int(mb.attention_mask.sum()) for mb in mbs)),
        "tokens_computed": float(sum(mb.computed_tokens for mb in mbs)),
        "micro_batches": float(len(mbs)),
    }


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier of the base lr at optimizer step `step` (0-based) of `total`.

    Linear warmup over `warmup` steps, then constant or linear decay to 0 at step `total`.
    """
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    return max(0.0, (total - step) / max(total - warmup, 1))


def fit(
    trainer: PolicyTrainer, demos: Sequence[Demonstration], epochs: int, batch_episodes: int,
    seed: int = 0, on_step: Callable[[dict[str, float]], None] | None = None,
    schedule: str = "constant", warmup_steps: int = 0, max_wall_time_s: float = 0.0,
    start_epoch: int = 0,
) -> list[dict[str, float]]:
    """Train `epochs` passes (episodes shuffled per epoch); returns every step's metrics.

    `max_wall_time_s` > 0 stops after the step that reaches it (the lr schedule still spans
    every epoch: a linear decay is then cut short, not compressed). `start_epoch` > 0: the
    first `start_epoch` epochs are already trained (a resumed trainer); their shuffles are
    drawn and skipped, so the remaining epochs see the order one whole run gives them."""
    deadline = time.perf_counter() + max_wall_time_s if max_wall_time_s > 0 else math.inf
    rng = random.Random(seed)
    per_epoch = -(-len(demos) // batch_episodes)
    total = epochs * per_epoch
    base_lrs = [g["lr"] for g in trainer.optimizer.param_groups]
    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        order = list(range(len(demos)))
        rng.shuffle(order)
        if epoch < start_epoch:
            continue
        for start in range(0, len(order), batch_episodes):
            chosen = [demos[i] for i in order[start:start + batch_episodes]]
            mbs = sft_micro_batches(
                demo_pairs(chosen), trainer.lcfg.micro_batch_tokens, trainer.pad_id,
                pack=trainer.lcfg.pack_steps, shared_prefix=trainer.shared_prefix,
                rho=trainer.attention_cost,
            )
            done = start_epoch * per_epoch + len(history)  # optimizer steps before this one
            factor = lr_factor(done, total, warmup_steps, schedule)
            for group, base in zip(trainer.optimizer.param_groups, base_lrs, strict=True):
                group["lr"] = base * factor
            t0 = time.perf_counter()
            m = sft_step(trainer, mbs)
            dt = time.perf_counter() - t0
            m.update(step=float(done + 1), total_steps=float(total),
                     epoch=epoch + (start + len(chosen)) / len(demos), step_time_s=dt,
                     tokens_per_s=m["tokens"] / max(dt, 1e-9), lr=base_lrs[0] * factor)
            history.append(m)
            if on_step is not None:
                on_step(m)
            if time.perf_counter() >= deadline:
                return history
    return history


def trainer_config(cfg: RunConfig) -> RunConfig:
    """The run config the trainer is built with: `sft.lr`, no reference model (no KL), one
    unsharded process (the RL learner's world_size / CPU offload do not apply)."""
    return msgspec.structs.replace(
        cfg,
        learner=msgspec.structs.replace(cfg.learner, lr=cfg.sft.lr, world_size=1,
                                        cpu_offload=False),
        algorithm=msgspec.structs.replace(cfg.algorithm, kl_coef=0.0),
    )


# --------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------


def load_demos(cfg: RunConfig, tokenizer: Any, stats: DemoStats) -> list[Demonstration]:
    """The demonstrations `sft.demos_source` names, built with the run's context builder.

    Transcripts render `tool` messages as our ToolEnv does (a user turn of `<tool_response>`
    blocks), except for an env whose agent talks to a generation endpoint (blackbox,
    verifiers): the endpoint renders every message with the role it is sent with, so its
    demonstrations keep theirs and train on exactly the token layout RL samples in."""
    from agent_r1_async.actors.context import make_context_builder
    from agent_r1_async.envs.agent import AgentDefinition
    from agent_r1_async.envs.registry import get_env_spec

    builder = make_context_builder(cfg.context, tokenizer)
    s = cfg.sft
    spec = get_env_spec(cfg.env)
    if s.demos_source == "jsonl":
        return jsonl_demos(s.jsonl_path, tokenizer, builder, cfg.model.max_model_len,
                           limit=s.num_demos, stats=stats,
                           tool_as_user=not isinstance(spec.definition, AgentDefinition),
                           seed=s.demo_seed, offset=s.demo_offset)
    return oracle_demos(spec, demo_tasks(spec.tasks(cfg.env.train_split), s.demo_seed,
                                         s.demo_offset), tokenizer, builder,
                        cfg.model.max_model_len, limit=s.num_demos, stats=stats)


def progress(m: dict[str, float]) -> str:
    return (
        f"[sft] step {m['step']:.0f}/{m['total_steps']:.0f} | epoch {m['epoch']:.2f} | "
        f"loss {m['loss']:.4f} | grad {m['grad_norm']:.2f} | {m['tokens_per_s']:.0f} tok/s | "
        f"{m['step_time_s']:.1f} s/step"
    )


def resumed_epochs(state: dict[str, Any], num_demos: int, scfg: SftConfig) -> int:
    """The whole epochs a checkpoint of an `sft` run on `num_demos` demonstrations holds
    (`sft.resume_from`); a ValueError naming the key when it cannot be resumed exactly."""
    per_epoch = -(-num_demos // scfg.batch_episodes)
    done = int(state.get("updates", -1))
    if int(state.get("sft_demos", -1)) != num_demos:
        raise ValueError(f"sft.resume_from: {scfg.resume_from} trained on "
                         f"{state.get('sft_demos', 'no')} demonstrations, this run has "
                         f"{num_demos}")
    if done <= 0 or done % per_epoch:
        raise ValueError(f"sft.resume_from: {scfg.resume_from} stopped after {done} steps, "
                         f"not after a whole epoch of {per_epoch}")
    if done // per_epoch >= scfg.epochs:
        raise ValueError(f"sft.resume_from: {scfg.resume_from} has {done // per_epoch} "
                         f"epochs already, sft.epochs is {scfg.epochs}")
    return done // per_epoch


def train_stage(cfg: RunConfig, run_dir: Path, logger: Any) -> str:
    """Demos → train → checkpoint in RUN_DIR/checkpoints (no evaluation); returns its path.

    Shared by the `sft` command and `launch.warm_start`.
    """
    from agent_r1_async.models import load_tokenizer, resolve_model

    start_path = resolve_model(cfg.model.start_from)
    stats = DemoStats()
    demos = load_demos(cfg, load_tokenizer(start_path), stats)
    if not demos:
        raise ValueError(
            f"sft: no usable demonstrations from {cfg.sft.demos_source} (failed {stats.failed}, "
            f"no oracle {stats.no_oracle}, too long {stats.too_long})"
        )
    logger.console(
        f"[sft] {len(demos)} demonstrations from {cfg.sft.demos_source}: "
        f"{sum(len(d.steps) for d in demos)} steps, {sum(d.num_tokens for d in demos)} tokens "
        f"(dropped: failed {stats.failed}, no oracle {stats.no_oracle}, too long {stats.too_long})"
    )
    torch.manual_seed(cfg.learner.seed)
    start_epoch = 0
    if cfg.sft.resume_from:
        resume = cfg.sft.resume_from
        trainer = PolicyTrainer(trainer_config(cfg), checkpoint.checkpoint_model_path(resume, cfg))
        start_epoch = resumed_epochs(checkpoint.load_trainer_state(resume, trainer), len(demos),
                                     cfg.sft)
        logger.console(f"[sft] resumed from {resume}: {start_epoch} of {cfg.sft.epochs} "
                       "epochs done")
    else:
        trainer = PolicyTrainer(trainer_config(cfg), start_path)

    def on_step(m: dict[str, float]) -> None:
        step = int(m["step"])
        if step % cfg.sft.log_every == 0 or step == int(m["total_steps"]):
            logger.log({f"sft/{k}": v for k, v in m.items()}, step=step)
            logger.console(progress(m))

    t_train = time.perf_counter()
    history = fit(trainer, demos, cfg.sft.epochs, cfg.sft.batch_episodes,
                  seed=cfg.learner.seed if cfg.sft.demo_seed < 0 else cfg.sft.demo_seed,
                  on_step=on_step, schedule=cfg.sft.schedule,
                  warmup_steps=cfg.sft.warmup_steps, max_wall_time_s=cfg.sft.max_wall_time_s,
                  start_epoch=start_epoch)
    train_s = time.perf_counter() - t_train
    ckpt = checkpoint.save_checkpoint(str(run_dir), trainer, {  # updates: resumed ones too
        "version": 0, "updates": int(history[-1]["step"]), "samples_drawn": 0,
        "sft_demos": len(demos), "sft_final_loss": history[-1]["loss"],
    })
    del trainer
    gc.collect()
    logger.console(f"[sft] {len(history)} steps in {train_s:.1f} s; checkpoint {ckpt}")
    return ckpt

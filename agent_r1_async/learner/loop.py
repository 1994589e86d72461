"""The learner process: sample → advantages → proximal pass → PPO epochs → publish.

`Learner.update()` is one cycle of the algorithm in DESIGN.md ("The learner's objective"):

    batch    = source.sample(batch_groups)                      # groups of step records
    rows     = one row per step, with its advantage             # GRPO / RLOO / REINFORCE++
    micro-batches; an episode's chained steps share a sequence  # learner.pack_steps
    proximal = log π_v(action) for every row, no grad           # before any optimizer step
                                                                # (skipped when exact: 1 epoch)
    (PPO: V(s_t) from the same pass → step-level GAE → advantages, value targets)
    repeat ppo_epochs: one AdamW step over all micro-batches    # gradient accumulation
    version += 1; source.set_version(version); publish every N updates

`source` is anything with `.sample(num_groups, learner_version, timeout_s) -> SampleBatch`
and `.set_version(version)` (a `BufferClient`, or a fake in tests). A batch that is not
ready is asked for again until `learner.sample_timeout_s` has passed (then TimeoutError).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agent_r1_async import config, models
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import batching, checkpoint
from agent_r1_async.learner.episode_stats import episode_stats, staleness_histogram
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.wire import messages
from agent_r1_async.wire.weight_channel import WeightSender


class Learner:
    """Owns the trainer, the policy version counter and the publish / checkpoint cadence."""

    def __init__(
        self,
        cfg: config.RunConfig,
        transport: Any,
        source: Any,
        publisher: WeightSender | None,
        run_dir: str | None,
        model_path: str | None = None,
        trainer: PolicyTrainer | None = None,
    ) -> None:
        self.cfg = cfg
        self.transport = transport
        self.source = source
        self.publisher = publisher
        self.run_dir = run_dir
        torch.manual_seed(cfg.learner.seed)
        if trainer is not None:  # injected (benchmarks, tests): no model is loaded
            self.trainer = trainer
        else:
            path = model_path or cfg.model.start_from
            self.trainer = PolicyTrainer(cfg, models.resolve_model(path))
        self.version = 0
        """Policy version of the current weights (the actors' data is stamped with it)."""
        self.updates = 0
        self.samples_drawn = 0
        """Data cursor: batches drawn from the source so far."""
        self._last_publish = float("-inf")
        self.last_staleness_hist: dict[int, int] = {}
        """Token-weighted staleness histogram of the last update's batch."""

    @classmethod
    def from_checkpoint(
        cls, cfg: config.RunConfig, transport: Any, source: Any,
        publisher: WeightSender | None, run_dir: str, checkpoint_dir: str | None = None,
    ) -> Learner:
        """Resume from `checkpoint_dir` (default: `run_dir`'s latest): versions continue."""
        ckpt = checkpoint_dir or checkpoint.latest_checkpoint(run_dir)
        if ckpt is None:
            raise FileNotFoundError(f"no checkpoint under {run_dir}/checkpoints")
        learner = cls(cfg, transport, source, publisher, run_dir,
                      model_path=checkpoint.checkpoint_model_path(ckpt, cfg))
        state = checkpoint.load_trainer_state(ckpt, learner.trainer)
        learner.version = int(state["version"])
        learner.updates = int(state["updates"])
        learner.samples_drawn = int(state.get("samples_drawn", 0))
        source.set_version(learner.version)
        return learner

    def update(self) -> dict[str, float]:
        """One sample → optimize → version++ → publish cycle; returns its metrics."""
        t0 = time.monotonic()
        batch = self._sample()
        t_data = time.monotonic()
        rows, mbs = self._prepare(batch)
        if self.trainer.needs_proximal_pass(self.cfg.learner.ppo_epochs):
            self.trainer.proximal_pass(mbs)
        if self.cfg.algorithm.name == "ppo":
            fill_gae(rows, mbs, self.cfg.algorithm)
        metrics = epoch_mean([self.trainer.optimize(mbs) for _ in range(self.cfg.learner.ppo_epochs)])
        self.version += 1
        self.updates += 1
        self.source.set_version(self.version)
        if self.updates % self.cfg.learner.publish_every == 0:
            self.publish()
        elapsed = time.monotonic() - t0
        tokens = sum(mb.num_tokens for mb in mbs) * self.cfg.learner.ppo_epochs
        metrics.update(batch_metrics(rows, mbs, self.version - 1))
        metrics.update(episode_stats(batch))
        self.last_staleness_hist = staleness_histogram(batch, self.version - 1)
        metrics.update(version=self.version, update_time_s=elapsed,
                       data_wait_s=t_data - t0, idle_frac=(t_data - t0) / max(elapsed, 1e-9),
                       tokens_per_s=tokens / max(elapsed - (t_data - t0), 1e-9))
        return metrics

    def _sample(self) -> messages.SampleBatch:
        lc = self.cfg.learner
        deadline = time.monotonic() + lc.sample_timeout_s
        while True:
            left = deadline - time.monotonic()
            batch = self.source.sample(self.cfg.algorithm.batch_groups, self.version,
                                       max(min(left, lc.republish_s), 0.0))
            if batch.ready and batch.groups:
                self.samples_drawn += 1
                return batch
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no batch after learner.sample_timeout_s="
                                   f"{lc.sample_timeout_s}: {batch.reason}")
            self.publish(only_if_idle_s=lc.republish_s)
            time.sleep(min(0.05, max(left, 0.0)))

    def publish(self, only_if_idle_s: float = 0.0) -> None:
        """Publish the current weights. While the learner waits for data it re-publishes
        every `learner.republish_s`: a SUB socket that joined after the last publish (a
        restarted actor, a resumed run) would otherwise serve old weights whose data is all
        too stale to train, and nothing would ever be published again."""
        if self.publisher is None:
            return
        if only_if_idle_s and time.monotonic() - self._last_publish < only_if_idle_s:
            return
        self.publisher.publish(self.version, self.trainer.published_state_dict())
        self._last_publish = time.monotonic()

    def _prepare(self, batch: messages.SampleBatch) -> tuple[list[batching.Row], list[batching.MicroBatch]]:
        algo = self.cfg.algorithm
        groups = batching.trainable_groups(batch)
        if not groups:
            raise ValueError(f"batch at version {self.version} has no trainable episodes")
        rewards = batching.episode_rewards([g for g, _ in groups])
        returns = [[adv.discounted_returns(ep, algo.gamma) for ep in g] for g in rewards]
        if algo.name == "ppo":  # filled in after the proximal pass has read V(s_t)
            advantages = [[[0.0] * len(ep) for ep in g] for g in returns]
        else:
            advantages = adv.compute_advantages(returns, algo.name, algo.credit, algo.std_normalize)
        rows = batching.build_rows(groups, advantages, rewards)
        mbs = batching.make_micro_batches(
            rows, self.cfg.learner.micro_batch_tokens, self.trainer.pad_id,
            pack=self.cfg.learner.pack_steps and algo.name != "ppo",
        )
        return rows, mbs

    def save_checkpoint(self) -> str:
        if self.run_dir is None:
            raise ValueError("Learner.save_checkpoint needs a run_dir")
        return checkpoint.save_checkpoint(self.run_dir, self.trainer, {
            "version": self.version, "updates": self.updates, "samples_drawn": self.samples_drawn,
        })

    def run(self, stop: Any = None, log: Any = None) -> None:
        """Update until `learner.total_updates` or `stop.is_set()`; checkpoint on the way out."""
        lc = self.cfg.learner
        try:
            while self.updates < lc.total_updates and not (stop is not None and stop.is_set()):
                metrics = self.update()
                if log is not None:
                    log(metrics)
                if self.run_dir is not None and self.updates % lc.checkpoint_every == 0:
                    self.save_checkpoint()
        finally:
            if self.run_dir is not None and self.updates > 0:
                self.save_checkpoint()


def fill_gae(rows: list[batching.Row], mbs: list[batching.MicroBatch], algo: config.AlgorithmConfig) -> None:
    """PPO: step-level GAE per episode from the proximal pass's V(s_t); sets advantages/targets."""
    values = [0.0] * len(rows)
    for mb in mbs:
        for i, v in zip(mb.row_index.tolist(), mb.old_values.tolist(), strict=True):
            values[i] = v
    episodes: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(rows):  # rows of an episode are in step order
        episodes.setdefault((r.group_index, r.episode_index), []).append(i)
    targets = [0.0] * len(rows)
    for idx in episodes.values():
        a, t = adv.gae([rows[i].reward for i in idx], [values[i] for i in idx], algo.gamma, algo.lam)
        for i, ai, ti in zip(idx, a, t, strict=True):
            rows[i].advantage, targets[i] = ai, ti
    for mb in mbs:
        ix = mb.row_index.tolist()
        mb.set_advantages(torch.tensor([rows[i].advantage for i in ix]))
        mb.value_targets = torch.tensor([targets[i] for i in ix], dtype=torch.float32)


def epoch_mean(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """The optimizer metrics of one update: the mean over its PPO epochs (`is_weight_max`: the
    max). A later epoch can be clipped everywhere (zero gradient); the mean still says how much
    the update moved."""
    out = {k: sum(m[k] for m in per_epoch) / len(per_epoch) for k in per_epoch[0]}
    if "is_weight_max" in out:
        out["is_weight_max"] = max(m["is_weight_max"] for m in per_epoch)
    return out


def batch_metrics(rows: list[batching.Row], mbs: list[batching.MicroBatch], version: int) -> dict[str, float]:
    """Token-weighted staleness (learner version − per-token version), rewards, sizes."""
    stale = torch.cat([(version - mb.token_versions)[mb.action_mask] for mb in mbs]).float()
    episodes = {(r.group_index, r.episode_index): 0.0 for r in rows}
    for r in rows:
        episodes[(r.group_index, r.episode_index)] += r.reward
    return {
        "staleness_mean": float(stale.mean()) if stale.numel() else 0.0,
        "staleness_max": float(stale.max()) if stale.numel() else 0.0,
        "reward_mean": sum(episodes.values()) / max(len(episodes), 1),
        "advantage_mean": sum(r.advantage for r in rows) / max(len(rows), 1),
        "rows": float(len(rows)),
        "episodes": float(len(episodes)),
        "micro_batches": float(len(mbs)),
    }

"""The learner process: sample → advantages → proximal pass → PPO epochs → publish.

`Learner.update()` is one cycle of the objective in docs/architecture.md ("The learner's
objective"):

    batch    = source.sample(batch_groups)                      # groups of step records
    rows     = one row per step, with its advantage             # GRPO / RLOO / REINFORCE++
    micro-batches; an episode's chained steps share a sequence  # learner.pack_steps
    a group's sequences share their prefix's computation        # learner.shared_prefix
    proximal = log π_v(action) for every row, no grad           # before any optimizer step
                                                                # (skipped when exact: 1 epoch)
    (PPO: V(s_t) from the same pass → step-level GAE → advantages, value targets)
    repeat ppo_epochs: one AdamW step over all micro-batches    # gradient accumulation
    version += 1; source.set_version(version); publish every N updates
    every logging.episodes_every updates: a sample of the batch's episodes to read
                                                                # learner/episode_sample.py

Distributed (`learner.world_size` > 1, one `Learner` per rank, learner/distributed.py): rank 0
alone talks to the buffer and broadcasts each poll's outcome (the batch, or "not ready" and
whether to re-publish), so the ranks stay in lockstep through every collective; every rank
builds the same rows and trains the training sequences `distributed.balance` gives it (equal
action+context tokens, not rows; under `learner.shared_prefix` the units are the prefix trees'
rows, so a tree stays whole on one rank); only rank 0 publishes, but every rank takes part in
the gather of the full weights. Other ranks get `source=None, weight_sender=None`.

`source` is a `protocols.SampleSource`: `.sample(num_groups, learner_version, timeout_s) ->
SampleBatch` and `.set_version(version)` (a `BufferClient`, or a fake in tests). A batch that is not
ready is asked for again until `learner.sample_timeout_s` has passed (then TimeoutError).
"""

from __future__ import annotations

import threading
import time

import torch

from agent_r1_async import config, models
from agent_r1_async import returns as ret
from agent_r1_async.learner import advantages as adv
from agent_r1_async.learner import batching, checkpoint, memory_savers
from agent_r1_async.learner import distributed as dist_util
from agent_r1_async.learner.episode_sample import EpisodeSampler
from agent_r1_async.learner.episode_stats import episode_stats, staleness_histogram
from agent_r1_async.learner.is_weights import weight_edges, weight_histogram
from agent_r1_async.learner.protocols import SampleSource
from agent_r1_async.learner.trainer import FORWARD_WORK, TRAIN_WORK, PolicyTrainer
from agent_r1_async.weights.seam import WeightSender
from agent_r1_async.wire import messages


class SamplingStopped(RuntimeError):
    """An update's wait for data ended by `Learner.stop_waiting` (the launch is stopping)."""


class Learner:
    """Owns the trainer, the policy version counter and the publish / checkpoint cadence."""

    def __init__(
        self,
        cfg: config.RunConfig,
        source: SampleSource | None,
        weight_sender: WeightSender | None,
        run_dir: str | None,
        model_path: str | None = None,
        trainer: PolicyTrainer | None = None,
    ) -> None:
        self.cfg = cfg
        self.source = source
        self.weight_sender = weight_sender
        """Where `publish` sends the weights (weights/seam.py; rank 0 only)."""
        self._publishes = dist_util.broadcast(weight_sender is not None, bool)
        """Rank 0 has a weight sender: then every rank joins the weight gathers for it."""
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
        self._stop_waiting = threading.Event()
        self._computing: tuple[float, int] | None = None
        """While an update computes: (its compute's start, its work in forward passes)."""
        self._last_publish = float("-inf")
        self.last_staleness_hist: dict[int, int] = {}
        """Token-weighted staleness histogram of the last update's batch."""
        self.last_is_weight_hist: dict[str, list[float]] = {}
        """The last update's importance weights over its action tokens: {"edges": ...,
        "counts": ...} (learner/is_weights.py)."""
        self.episodes = EpisodeSampler(cfg)
        """Every `logging.episodes_every` updates, a sample of the batch's episodes to read
        (learner/episode_sample.py)."""
        self.last_episodes: list[dict] = []
        """The last update's episode sample, one row per step ([] when it took none)."""
        self.last_update: dict[str, dict[str, float]] = {}
        """The last update's numeric metrics and staleness histogram, kept in its checkpoint:
        the launcher logs them from there if it stopped before logging that update
        (run/output/metrics.py, `MetricsLogger`)."""

    @classmethod
    def from_checkpoint(
        cls, cfg: config.RunConfig, source: SampleSource | None,
        weight_sender: WeightSender | None, run_dir: str, checkpoint_dir: str | None = None,
    ) -> Learner:
        """Resume from `checkpoint_dir` (default: `run_dir`'s latest): versions continue.
        Any world size resumes any other's checkpoint (DCP reshards on load)."""
        ckpt = checkpoint_dir or checkpoint.latest_checkpoint(run_dir)
        if ckpt is None:
            raise FileNotFoundError(f"no checkpoint under {run_dir}/checkpoints")
        learner = cls(cfg, source, weight_sender, run_dir,
                      model_path=checkpoint.checkpoint_model_path(ckpt, cfg))
        state = checkpoint.load_trainer_state(ckpt, learner.trainer)
        learner.version = int(state["version"])
        learner.updates = int(state["updates"])
        learner.samples_drawn = int(state.get("samples_drawn", 0))
        if source is not None:
            source.set_version(learner.version)
        return learner

    def update(self) -> dict[str, float]:
        """One sample → optimize → version++ → publish cycle; returns its metrics."""
        t0 = time.monotonic()
        sampled = self.episodes.due(self.updates + 1)
        batch = self._sample(self.episodes.failed if sampled else 0)
        t_data = time.monotonic()
        rows, mbs = self._prepare(batch)
        proximal = self.trainer.needs_proximal_pass(self.cfg.learner.ppo_epochs)
        self._computing = (time.monotonic(), len(mbs) * (
            FORWARD_WORK * proximal + TRAIN_WORK * self.cfg.learner.ppo_epochs))
        self.trainer.work_done = 0
        try:
            if proximal:
                self.trainer.proximal_pass(mbs)
            if self.cfg.algorithm.name == "ppo":
                fill_gae(rows, mbs, self.cfg.algorithm)
            counts = batching.batch_counts(rows)
            metrics = epoch_mean([self.trainer.optimize(mbs, self.version, counts)
                                  for _ in range(self.cfg.learner.ppo_epochs)])
        finally:
            self._computing = None
        c_max = self.cfg.algorithm.c_max
        self.last_is_weight_hist = {"edges": weight_edges(c_max),
                                    "counts": weight_histogram(mbs, c_max)}
        self.version += 1
        self.updates += 1
        if self.source is not None:
            self.source.set_version(self.version)
        if self.updates % self.cfg.learner.publish_every == 0:
            self.publish()
        self.last_episodes = []
        if sampled:
            t_sample = time.monotonic()
            self.last_episodes = self.episodes.sample(batch, rows, mbs, self.version - 1,
                                                      self.version)
            metrics["episodes_sample_s"] = time.monotonic() - t_sample
        memory_savers.release_free_memory()  # the update's freed activations: back to the system
        elapsed = time.monotonic() - t0
        tokens = sum(mb.num_tokens for mb in mbs) * self.cfg.learner.ppo_epochs
        metrics.update(rank_metrics(tokens, elapsed - (t_data - t0)))
        metrics.update(batch_metrics(rows, mbs, self.version - 1))
        metrics.update(episode_stats(batch))
        self.last_staleness_hist = staleness_histogram(batch, self.version - 1)
        metrics.update(version=self.version, update_time_s=elapsed,
                       data_wait_s=t_data - t0, idle_frac=(t_data - t0) / max(elapsed, 1e-9),
                       tokens_per_s=tokens / max(elapsed - (t_data - t0), 1e-9))
        self.last_update = {
            "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
            "staleness_hist": {str(k): float(n) for k, n in self.last_staleness_hist.items()}}
        return metrics

    def compute_progress(self) -> dict[str, float]:
        """From another thread: the update in progress's compute since its batch came,
        {"work_done", "work_total" (in forward passes over its micro-batches, trainer.py
        `FORWARD_WORK`), "computing_s"}; {} while no update computes (it waits for data, or
        none runs). The launcher's stop judges from it how long a first update may still
        take (run/processes/supervisor.py `update_left_s`)."""
        computing = self._computing
        if computing is None:
            return {}
        started, total = computing
        return {"work_done": float(getattr(self.trainer, "work_done", 0)),
                "work_total": float(total), "computing_s": time.monotonic() - started}

    def stop_waiting(self) -> None:
        """From another thread: an update waiting for data gives up at its next poll (within
        `learner.republish_s`) with `SamplingStopped`. The launcher asks before its final
        checkpoint, which runs on the same thread as updates (run/processes/learner_group.py) and would otherwise
        wait behind an update that no data will ever come for (every env failing, actors
        already stopped) until `learner.sample_timeout_s`."""
        self._stop_waiting.set()

    def _sample(self, failed: int = 0) -> messages.SampleBatch:
        """Rank 0 polls the source; each poll's outcome is broadcast, so all ranks return the
        same batch, or raise together, or re-publish (a collective) together. `failed`: the
        failed episodes to ask for with it (an episode-sampled update)."""
        lc = self.cfg.learner
        deadline = time.monotonic() + lc.sample_timeout_s
        while True:
            outcome: tuple[messages.SampleBatch | None, str, bool] | None = None
            if dist_util.rank() == 0:
                assert self.source is not None, "rank 0 samples: it is built with the source"
                left = deadline - time.monotonic()
                batch = self.source.sample(self.cfg.algorithm.batch_groups, self.version,
                                           max(min(left, lc.republish_s), 0.0), failed)
                ready = batch.ready and bool(batch.groups)
                stopped = self._stop_waiting.is_set() and not ready
                outcome = (batch if ready else None,
                           "stopped by the launcher" if stopped else batch.reason,
                           (time.monotonic() >= deadline or stopped) and not ready)
            batch, reason, timed_out = dist_util.broadcast(
                outcome, tuple[messages.SampleBatch | None, str, bool])
            if batch is not None:
                self.samples_drawn += 1
                return batch
            if timed_out and reason == "stopped by the launcher":
                raise SamplingStopped(reason)
            if timed_out:
                raise TimeoutError(f"no batch after learner.sample_timeout_s="
                                   f"{lc.sample_timeout_s}: {reason}")
            self._republish_if_idle()
            time.sleep(0.05)

    def _republish_if_idle(self) -> None:
        """Rank 0's clock decides (the publish is a collective when sharded)."""
        due = self._publishes and (
            time.monotonic() - self._last_publish >= self.cfg.learner.republish_s)
        if dist_util.broadcast(due, bool):
            self.publish()

    def publish(self, only_if_idle_s: float = 0.0) -> None:
        """Publish the current weights. While the learner waits for data it re-publishes
        every `learner.republish_s`: a SUB socket that joined after the last publish (a
        restarted actor, a resumed run) would otherwise serve old weights whose data is all
        too stale to train, and nothing would ever be published again."""
        if not self._publishes:  # sharded: rank 0 publishes, every rank gathers
            return
        if only_if_idle_s and time.monotonic() - self._last_publish < only_if_idle_s:
            return
        # fresh CPU copies in the engines' dtype: sent in place
        weights = self.trainer.published_state_dict(self.trainer.publish_dtype)
        if self.weight_sender is not None:
            self.weight_sender.publish(self.version, weights, copy=False)
        self._last_publish = time.monotonic()

    def _prepare(self, batch: messages.SampleBatch) -> tuple[list[batching.Row], list[batching.MicroBatch]]:
        algo = self.cfg.algorithm
        groups = batching.trainable_groups(batch)
        if not groups:
            raise ValueError(f"batch at version {self.version} has no trainable episodes")
        rewards = batching.episode_rewards([g for g, _ in groups])
        returns = [[ret.discounted_returns(ep, algo.gamma) for ep in g] for g in rewards]
        if algo.name == "ppo":  # filled in after the proximal pass has read V(s_t)
            advantages = [[[0.0] * len(ep) for ep in g] for g in returns]
        else:
            advantages = adv.compute_advantages(returns, algo.name, algo.credit, algo.std_normalize)
        rows = batching.build_rows(groups, advantages, rewards)
        seqs = batching.training_sequences(rows, self.cfg.learner.pack_steps)
        if skips_zero_advantage(self.cfg):
            seqs = batching.trained_sequences(rows, seqs)
        budget, pad = self.cfg.learner.micro_batch_tokens, self.trainer.pad_id
        # The units ranks share are the forward's rows: a group's prefix tree stays on one rank.
        trees = batching.plan_trees(rows, seqs, budget, self.trainer.shared_prefix,
                                    self.trainer.attention_cost)
        mine = dist_util.balance([t.tokens for t in trees], dist_util.world_size())
        mbs = batching.trees_to_micro_batches(
            rows, seqs, [trees[i] for i in mine[dist_util.rank()]], budget, pad)
        return rows, mbs

    def save_checkpoint(self) -> str:
        if self.run_dir is None:
            raise ValueError("Learner.save_checkpoint needs a run_dir")
        return checkpoint.save_checkpoint(self.run_dir, self.trainer, {
            "version": self.version, "updates": self.updates, "samples_drawn": self.samples_drawn,
            "last_update": self.last_update,
        }, keep=self.cfg.learner.keep_checkpoints)

    def run_once(self) -> dict[str, float]:
        """One iteration of the learner's loop: one update, then the periodic checkpoint
        (`learner.checkpoint_every`); `launch` drives one call at a time."""
        metrics = self.update()
        if self.run_dir is not None and self.updates % self.cfg.learner.checkpoint_every == 0:
            self.save_checkpoint()
            metrics["checkpoint_saved"] = 1.0
        return metrics


def skips_zero_advantage(cfg: config.RunConfig) -> bool:
    """`learner.skip_zero_advantage` where a step of advantage 0 has exactly zero gradient: its
    policy loss is w·min(r·0, clip(r)·0) = 0, and no other term reads it (no value head, no KL
    or entropy term)."""
    algo = cfg.algorithm
    return (cfg.learner.skip_zero_advantage and algo.name != "ppo" and algo.kl_coef == 0
            and algo.entropy_coef == 0)


def fill_gae(rows: list[batching.Row], mbs: list[batching.MicroBatch], algo: config.AlgorithmConfig) -> None:
    """PPO: step-level GAE per episode from the proximal pass's V(s_t); sets advantages/targets."""
    values = [0.0] * len(rows)
    for mb in mbs:
        for i, v in zip(mb.row_index.tolist(), mb.old_values.tolist(), strict=True):
            values[i] = v
    # Sharded: each rank has V(s_t) of its own rows only, and an episode's steps may sit on
    # several ranks; every row is on exactly one rank, so the sum is the full list.
    values = dist_util.all_reduce(values)
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


def rank_metrics(tokens: int, train_s: float) -> dict[str, float]:
    """Tokens/s per rank and in total, load imbalance (max / mean tokens over ranks; 1 =
    even, or nothing computed) and this rank's peak memory (CUDA: allocated; CPU: peak RSS),
    worst rank too."""
    n, r = dist_util.world_size(), dist_util.rank()
    per_rank = [0.0] * n
    per_rank[r] = float(tokens)
    per_rank = dist_util.all_reduce(per_rank)
    speed = tokens / max(train_s, 1e-9)
    total_speed = dist_util.all_reduce([speed])[0]
    peak = _peak_memory_gb()
    return {
        "tokens_per_s_rank": speed,
        "tokens_per_s_total": total_speed,
        "load_imbalance": max(per_rank) / (sum(per_rank) / n) if sum(per_rank) > 0 else 1.0,
        "peak_memory_gb": peak,
        "peak_memory_gb_max_rank": dist_util.all_reduce([peak], op="max")[0],
    }


def _peak_memory_gb() -> float:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def epoch_mean(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """The optimizer metrics of one update: the mean over its PPO epochs (`is_weight_max`: the
    max). A later epoch can be clipped everywhere (zero gradient); the mean still says how much
    the update moved."""
    out = {k: sum(m[k] for m in per_epoch) / len(per_epoch) for k in per_epoch[0]}
    if "is_weight_max" in out:
        out["is_weight_max"] = max(m["is_weight_max"] for m in per_epoch)
    return out


def batch_metrics(rows: list[batching.Row], mbs: list[batching.MicroBatch], version: int) -> dict[str, float]:
    """Token-weighted staleness (learner version − per-token version) over the whole batch,
    rewards, sizes (`micro_batches`: this rank's; `micro_batch_tokens_max`: the padded tokens
    of its largest, at most `learner.micro_batch_tokens` in a launched run), and the tokens one
    forward over the whole batch computes (`tokens_computed`, padding aside) against what flat
    rows would (`tokens_flat`): below it where `learner.shared_prefix` shares prompts. Steps
    of advantage exactly 0 (`zero_advantage_frac`) are left out of the forward under
    `learner.skip_zero_advantage`, so `rows_trained` and the token counts fall below the whole
    batch's (a packed sequence's zero steps before its last trained one stay in it)."""
    stale = torch.tensor([version - v for r in rows for v in r.token_versions], dtype=torch.float32)
    episodes = {(r.group_index, r.episode_index): 0.0 for r in rows}
    for r in rows:
        episodes[(r.group_index, r.episode_index)] += r.reward
    computed, flat, trained = dist_util.all_reduce([sum(mb.computed_tokens for mb in mbs),
                                                    sum(mb.flat_tokens for mb in mbs),
                                                    sum(mb.steps for mb in mbs)])
    return {
        "staleness_mean": float(stale.mean()) if stale.numel() else 0.0,
        "staleness_max": float(stale.max()) if stale.numel() else 0.0,
        "reward_mean": sum(episodes.values()) / max(len(episodes), 1),
        "advantage_mean": sum(r.advantage for r in rows) / max(len(rows), 1),
        "rows": float(len(rows)),
        "rows_trained": trained,
        "zero_advantage_frac": sum(r.advantage == 0.0 for r in rows) / max(len(rows), 1),
        "episodes": float(len(episodes)),
        "micro_batches": float(len(mbs)),
        "micro_batch_tokens_max": float(max((mb.num_tokens for mb in mbs), default=0)),
        "tokens_computed": computed,
        "tokens_flat": flat,
    }

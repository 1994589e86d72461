"""The episode sampler's cost: the learner's update time with it on and off, in one process.

    .venv/bin/python -m bench.bench_episode_sampler             # 6 pairs after a warm-up pair
    .venv/bin/python -m bench.bench_episode_sampler --pairs 10 --out bench/results/episode_sampler

One `Learner` with configs/default.yaml's learner (SmolLM2-135M, its precision, checkpointing,
packing, `learner.num_cpus` torch threads as a launch pins them) trains on synthetic batches shaped like the default launch's (`--groups` groups of
`--episodes` episodes of `--steps` steps: a `--prompt`-token first context, `--action`-token
actions, `--obs`-token observations, random token ids, delta records as the actors send them).
Updates alternate between the sampler off (`logging.episodes_every` 0) and on (every update
sampled, with `logging.episodes_failed` failed episodes from the source), the order flipping
every pair so that load drifts hit both sides. Reported: `learner/update_time_s` per side
(median, range), the per-pair difference on − off with its mean and 95 % interval, the
sampler's own time inside the update (`learner/episodes_sample_s`), and what the launch's
driver then spends writing one sample (`EpisodeLog.write`: the jsonl file and an offline
W&B table), which runs between updates, outside the learner's update.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.learner_common import DEFAULT_CONFIG
from bench.stats import cpu_and_amx, fmt_ci, fmt_spread, load_line, paired_diffs, utc_date


class SyntheticSource:
    """Batches of the bench's shape; failed episodes when asked for."""

    def __init__(self, args: argparse.Namespace, vocab: int, seed: int = 0) -> None:
        self.args, self.vocab, self.rng = args, vocab, random.Random(seed)
        self.version = 0

    def _ids(self, n: int) -> list[int]:
        return [self.rng.randrange(3, self.vocab) for _ in range(n)]

    def _episode(self, eid: str, gid: str, version: int, status: str = "ok") -> Any:
        from agent_r1_async.wire import messages as m

        a = self.args
        steps = []
        for t in range(a.steps):
            context = self._ids(a.prompt if t == 0 else a.obs)
            rec = m.StepRecord(
                episode_id=eid, group_id=gid, task_id=f"task-{gid}", actor_id="actor-0",
                env_name="arithmetic", step_index=t, context_ids=context,
                action_ids=self._ids(a.action),
                behavior_logprobs=[-self.rng.random() * 3 for _ in range(a.action)],
                policy_version=version, process_reward=0.1 * self.rng.random(),
                done=t == a.steps - 1, num_tool_calls=1)
            if t > 0:  # a delta: the previous context + action + this observation
                rec.context_from = t - 1
                rec.context_len = a.prompt + t * (a.action + a.obs)
            steps.append(rec)
        end = m.EpisodeEnd(episode_id=eid, group_id=gid, task_id=f"task-{gid}",
                           actor_id="actor-0", env_name="arithmetic", num_steps=a.steps,
                           outcome_reward=float(self.rng.random() < 0.5), status=status,
                           group_size=a.episodes,
                           error="" if status == "ok" else "ToolError: the bench's failure")
        return m.Episode(steps, end)

    def sample(self, num_groups: int, learner_version: int, timeout_s: float,
               failed_episodes: int = 0) -> Any:
        from agent_r1_async.wire import messages as m

        version = max(0, learner_version - 1)
        groups = [m.Group(f"g{learner_version}-{g}", f"task-{g}", "arithmetic",
                          [self._episode(f"e{learner_version}-{g}-{e}", f"g{learner_version}-{g}",
                                         version) for e in range(self.args.episodes)])
                  for g in range(num_groups)]
        failed = [self._episode(f"f{learner_version}-{i}", "gf", version, "env_error")
                  for i in range(failed_episodes)]
        return m.SampleBatch(groups, [1.0] * num_groups, learner_version, failed=failed)

    def set_version(self, version: int) -> None:
        self.version = version


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=6, help="timed on/off pairs after a warm-up")
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompt", type=int, default=320)
    p.add_argument("--action", type=int, default=48)
    p.add_argument("--obs", type=int, default=24)
    p.add_argument("--out", default="", help="directory for the raw JSON and text")
    args = p.parse_args()

    from agent_r1_async.config import load_config
    from agent_r1_async.learner.loop import Learner
    from agent_r1_async.run.output.episodes import EpisodeLog
    from agent_r1_async.run.output.metrics import MetricsLogger

    cfg = load_config(DEFAULT_CONFIG, [
        f"algorithm.batch_groups={args.groups}", f"algorithm.group_size={args.episodes}",
        "logging.episodes_every=1", "logging.episodes_failed=2", "logging.wandb_mode=offline"])
    import torch

    torch.set_num_threads(max(1, int(cfg.learner.num_cpus)))  # as a launch pins its learner
    learner = Learner(cfg, None, None, None)
    vocab = int(learner.trainer._causal_lm().config.vocab_size)
    learner.source = SyntheticSource(args, vocab)
    tmp = Path(tempfile.mkdtemp(prefix="bench-episodes-"))
    os.environ.setdefault("WANDB_SILENT", "true")
    logger = MetricsLogger(cfg, tmp)
    sink = EpisodeLog(tmp, 0, logger.log_table, lambda text, key: print(text))

    times: dict[str, list[float]] = {"off": [], "on": []}
    sample_s: list[float] = []
    write_s: list[float] = []
    rows_per_sample: list[int] = []
    load_before = load_line()
    t_start = time.time()
    for i in range(args.pairs + 1):
        for side in ("off", "on") if i % 2 == 0 else ("on", "off"):
            learner.episodes.every = 1 if side == "on" else 0
            m = learner.update()
            if i == 0:
                continue  # the warm-up pair
            times[side].append(float(m["update_time_s"]))
            if side == "on":
                sample_s.append(float(m["episodes_sample_s"]))
                rows_per_sample.append(len(learner.last_episodes))
                t0 = time.perf_counter()
                sink.write(learner.last_episodes, step=learner.version)
                write_s.append(time.perf_counter() - t0)
    logger.close()
    diffs = [on - off for on, off in zip(times["on"], times["off"], strict=True)]
    paired = paired_diffs(list(range(len(diffs))), diffs)
    noise = statistics.stdev(times["off"]) if len(times["off"]) > 1 else float("nan")
    model, amx = cpu_and_amx()
    result = {
        "date": utc_date(t_start),
        "cpu": model, "amx": amx, "load_before": load_before, "load_after": load_line(),
        "args": vars(args), "update_time_s": times, "diff_on_minus_off_s": diffs,
        "diff_mean_s": paired["mean"], "diff_ci95_s": [paired["lo"], paired["hi"]],
        "diff_excludes_zero": paired["excludes_zero"], "off_stdev_s": noise,
        "episodes_sample_s": sample_s, "driver_write_s": write_s,
        "rows_per_sample": rows_per_sample,
        "sample_file_bytes": [f.stat().st_size for f in sorted((tmp / "episodes").glob("*.jsonl"))],
    }
    lines = [
        f"{result['date']} · {model} · AMX {'yes' if amx else 'no'} · {load_before}",
        f"batch: {args.groups} groups × {args.episodes} episodes × {args.steps} steps "
        f"(prompt {args.prompt}, action {args.action}, observation {args.obs} tokens); "
        f"{args.pairs} pairs after a warm-up, order flipping",
        f"update time, sampler off: {fmt_spread(times['off'], 3, ' s')}",
        f"update time, sampler on:  {fmt_spread(times['on'], 3, ' s')}",
        f"on − off per pair: {fmt_ci(diffs, 3)} s; 95 % interval "
        f"[{paired['lo']:.3f}, {paired['hi']:.3f}] s "
        f"({'excludes' if paired['excludes_zero'] else 'includes'} 0); off's stdev {noise:.3f} s",
        f"sampler inside the update: {fmt_spread([s * 1000 for s in sample_s], 2, ' ms')}, "
        f"{statistics.median(rows_per_sample):.0f} rows a sample",
        f"driver's write (jsonl + W&B offline table): "
        f"{fmt_spread([s * 1000 for s in write_s], 1, ' ms')}",
        f"after: {result['load_after']}",
    ]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(t_start))
        (out / f"{stamp}.json").write_text(json.dumps(result, indent=1))
        (out / f"{stamp}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

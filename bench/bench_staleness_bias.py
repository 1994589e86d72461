"""Does the buffer's staleness handling bias training toward short episodes? The real
`EpisodeBuffer` (admission credits, group assembly, the store's staleness bound, the
sample-to-insert limiter) between simulated actors and a simulated learner, on a heavy-tailed
mix of episode lengths, in simulated time.

    .venv/bin/python -m bench.bench_staleness_bias
    .venv/bin/python -m bench.bench_staleness_bias --staleness 0 1 2 4 --seeds 0 1 2 \\
        --set buffer.stale_by=oldest_token --set buffer.stale_by=completion

What is simulated, and what is not:
- Actors: `--actors` × `--groups-in-flight` groups run at once; each asks the buffer for
  credits (`grant`) whenever a slot is free and again every `--poll-s`. A group is one task:
  its horizon H is drawn from `--mix` (weights and [lo, hi] step ranges), and each of its
  `algorithm.group_size` episodes takes H × a log-normal factor (sd `--length-sd`) steps,
  capped at `--max-turns`. Every episode of every group in flight advances one step per
  `--step-s` seconds (a batched engine), and each step is stamped with the actor's weight
  version at that moment: a weight update reaches episodes in flight (per-token versions).
- The learner asks for `algorithm.batch_groups` groups (`try_sample`) whenever it is free,
  trains for `--update-s`, then publishes version v + 1 to the buffer and the actors at once.
  A learner with no batch is idle until the next record arrives.
- Everything in between is the production code: which groups are admitted, when a group
  closes (`buffer.group_wait_s`, `buffer.min_group_episodes`), which are dropped as stale,
  and the buffer's own length ledger (`episodes/trained_length_ratio`, trained and
  generated episodes by length bucket), read from `stats()` as a launch logs it.
- Not simulated: the engine slowing down with more sequences in flight, rewards' effect on
  priorities (every group gets the same returns spread), failures.

Printed per (`--set` variant, max_staleness), mean over `--seeds` (± sd): episodes trained
per simulated minute, learner idle %, the mean length of trained over generated episodes,
episodes dropped by reason, the trained fraction per length bucket, and the staleness of the
trained action tokens (p50, p99, max: versions behind the learner that trains them).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agent_r1_async.buffers.buffer import EpisodeBuffer
from agent_r1_async.buffers.lengths import length_bucket, length_metrics
from agent_r1_async.config import AlgorithmConfig, BufferConfig
from agent_r1_async.wire.messages import EpisodeEnd, StepRecord
from bench.stats import load_line, mean_sd

DEFAULT_MIX = "0.70:4-10,0.20:10-30,0.08:30-60,0.02:60-100"
"""Weights and horizon ranges: episode lengths p50 9 steps, p99 85, mean 14.7 (p99/p50 9.4)."""


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Episode:
    eid: str
    steps: int
    done: int = 0


@dataclass
class Group:
    gid: str
    actor: str
    episodes: list[Episode]


@dataclass
class Run:
    trained_tokens: Counter[int] = field(default_factory=Counter)
    generated: Counter[int] = field(default_factory=Counter)
    """Episodes whose generation finished, by their true number of steps."""
    trained: Counter[int] = field(default_factory=Counter)
    idle_s: float = 0.0
    busy_s: float = 0.0
    updates: int = 0
    episodes_trained: int = 0


def parse_mix(text: str) -> list[tuple[float, int, int]]:
    """"w:lo-hi,..." → [(w, lo, hi)]; weights normalised."""
    out = []
    for part in text.split(","):
        w, _, rng = part.partition(":")
        lo, _, hi = rng.partition("-")
        out.append((float(w), int(lo), int(hi)))
    total = sum(w for w, _, _ in out)
    return [(w / total, lo, hi) for w, lo, hi in out]


def draw_lengths(rng: random.Random, mix: list[tuple[float, int, int]], n: int, sd: float,
                 max_turns: int) -> list[int]:
    """One group's episode lengths: a horizon from the mix, each episode H × lognormal(sd)."""
    u, acc = rng.random(), 0.0
    lo, hi = mix[-1][1], mix[-1][2]
    for w, a, b in mix:
        acc += w
        if u <= acc:
            lo, hi = a, b
            break
    horizon = rng.uniform(lo, hi)
    return [max(1, min(max_turns, round(horizon * math.exp(rng.gauss(0.0, sd)))))
            for _ in range(n)]


def simulate(cfg: BufferConfig, algo: AlgorithmConfig, args: argparse.Namespace,
             seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    clock = Clock()
    buf = EpisodeBuffer(cfg, algo, clock)
    mix = parse_mix(args.mix)
    run = Run()
    version = 0
    actors = [f"a{i}" for i in range(args.actors)]
    running: dict[str, list[Group]] = {a: [] for a in actors}
    events: list[tuple[float, int, str, Any]] = []
    seq = 0

    def push(t: float, kind: str, data: Any = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    def ask(actor: str) -> None:
        free = args.groups_in_flight - len(running[actor])
        if free <= 0:
            return
        grant = buf.grant(actor, free)
        for gid in grant.group_ids:
            lengths = draw_lengths(rng, mix, algo.group_size, args.length_sd, args.max_turns)
            grp = Group(gid, actor, [Episode(f"{gid}-e{j}", n) for j, n in enumerate(lengths)])
            running[actor].append(grp)
            push(clock.now + args.step_s, "step", grp)

    def advance(grp: Group) -> None:
        alive = False
        for ep in grp.episodes:
            if ep.done >= ep.steps:
                continue
            buf.ingest(StepRecord(
                episode_id=ep.eid, group_id=grp.gid, task_id=f"task-{grp.gid}",
                actor_id=grp.actor, env_name="sim", step_index=ep.done,
                context_ids=[1, 2, 3], action_ids=[5] * args.action_tokens,
                behavior_logprobs=[-0.5] * args.action_tokens, policy_version=version,
                process_reward=0.0, done=ep.done + 1 == ep.steps))
            ep.done += 1
            if ep.done == ep.steps:
                run.generated[ep.steps] += 1
                buf.ingest(EpisodeEnd(
                    episode_id=ep.eid, group_id=grp.gid, task_id=f"task-{grp.gid}",
                    actor_id=grp.actor, env_name="sim", num_steps=ep.steps,
                    outcome_reward=float(rng.random() < 0.5), status="ok",
                    group_size=algo.group_size))
            else:
                alive = True
        if alive:
            push(clock.now + args.step_s, "step", grp)
        else:
            running[grp.actor].remove(grp)
            ask(grp.actor)

    learner_free_at = 0.0
    idle_since: float | None = 0.0

    def learn() -> None:
        nonlocal idle_since, learner_free_at
        if clock.now < learner_free_at:
            return
        batch, _ = buf.try_sample(algo.batch_groups, version)
        if batch is None:
            if idle_since is None:
                idle_since = clock.now
            return
        if idle_since is not None:
            run.idle_s += clock.now - idle_since
            idle_since = None
        for g in batch.groups:
            run.episodes_trained += len(g.episodes)
            for ep in g.episodes:
                run.trained[len(ep.steps)] += 1
                for st in ep.steps:
                    run.trained_tokens[version - st.policy_version] += len(st.action_ids)
        run.busy_s += args.update_s
        learner_free_at = clock.now + args.update_s
        push(learner_free_at, "update_done")

    for a in actors:
        ask(a)
    for k in range(1, int(args.sim_s / args.poll_s) + 1):
        push(k * args.poll_s, "poll")
    while events:
        t, _, kind, data = heapq.heappop(events)
        if t > args.sim_s:
            break
        clock.now = t
        if kind == "step":
            advance(data)
        elif kind == "poll":
            buf.tick()
            for a in actors:
                ask(a)
        elif kind == "update_done":
            version += 1
            run.updates += 1
            buf.set_version(version)
            for a in actors:
                ask(a)
        learn()
    if idle_since is not None:
        run.idle_s += args.sim_s - idle_since
    stats = buf.stats()
    lm = length_metrics(stats.drops)
    gen, trained = bucketed(run.generated, args.max_turns), bucketed(run.trained, args.max_turns)
    tokens = sorted(run.trained_tokens.elements())
    drops = {k: v for k, v in stats.drops.items() if not k.startswith("length/") and v}
    return {
        "updates": run.updates,
        "episodes_per_min": 60.0 * run.episodes_trained / args.sim_s,
        "idle_pct": 100.0 * run.idle_s / args.sim_s,
        "generated_mean": _mean(run.generated),
        "trained_mean": _mean(run.trained),
        "length_ratio": _mean(run.trained) / _mean(run.generated),
        "ledger_length_ratio": lm.get("episodes/trained_length_ratio", math.nan),
        "trained_fraction": {f"le_{b}": trained[b] / n for b, n in sorted(gen.items())},
        "drops": drops,
        "token_staleness": {"p50": _pct(tokens, 0.5), "p99": _pct(tokens, 0.99),
                            "max": tokens[-1] if tokens else math.nan},
    }


def bucketed(lengths: Counter[int], max_turns: int) -> Counter[int]:
    """Episodes per length bucket, by the buffer's own rule (`length_bucket`)."""
    out: Counter[int] = Counter()
    for n, k in lengths.items():
        out[length_bucket(n, max_turns)] += k
    return out


def _mean(lengths: Counter[int]) -> float:
    total = sum(lengths.values())
    return sum(n * k for n, k in lengths.items()) / total if total else math.nan


def _pct(xs: list[int], q: float) -> float:
    return float(xs[min(len(xs) - 1, int(q * len(xs)))]) if xs else math.nan


def variant_configs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """Each `--set` is one variant (a comma joins several keys); none: the defaults."""
    return [(s, [kv for kv in s.split(",") if kv]) for s in (args.variants or [""])]


def build(overrides: list[str], staleness: int, args: argparse.Namespace
          ) -> tuple[BufferConfig, AlgorithmConfig]:
    """The run's buffer and algorithm sections: max_staleness `staleness`, the bench's group
    shape, then `overrides` ("buffer.k=v"), converted and checked as a config file's are."""
    sections: dict[str, dict[str, Any]] = {
        "buffer": {"max_staleness": staleness},
        "algorithm": {"group_size": args.group_size, "batch_groups": args.batch_groups}}
    for kv in overrides:
        key, _, raw = kv.partition("=")
        section, _, name = key.partition(".")
        if section not in sections:
            raise SystemExit(f"--set {kv}: only buffer.* and algorithm.* keys vary here")
        sections[section][name] = raw
    return (msgspec.convert(sections["buffer"], BufferConfig, strict=False),
            msgspec.convert(sections["algorithm"], AlgorithmConfig, strict=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="variants", action="append", default=[],
                    metavar="K=V[,K=V]", help="one variant of buffer./algorithm. keys")
    ap.add_argument("--mix", default=DEFAULT_MIX)
    ap.add_argument("--length-sd", type=float, default=0.3)
    ap.add_argument("--max-turns", type=int, default=100)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--groups-in-flight", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--batch-groups", type=int, default=2)
    ap.add_argument("--step-s", type=float, default=2.0,
                    help="seconds per step of every episode in flight")
    ap.add_argument("--update-s", type=float, default=30.0, help="seconds per learner update")
    ap.add_argument("--action-tokens", type=int, default=20)
    ap.add_argument("--poll-s", type=float, default=1.0)
    ap.add_argument("--sim-s", type=float, default=6 * 3600.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print(f"# {load_line()}; simulated {args.sim_s / 3600:.1f} h per run; mix {args.mix}; "
          f"{args.actors} actors x {args.groups_in_flight} groups x {args.group_size}; "
          f"batch {args.batch_groups} groups; step {args.step_s} s; update {args.update_s} s")
    results: dict[str, Any] = {}
    for name, overrides in variant_configs(args):
        for s in args.staleness:
            cfg, algo = build(overrides, s, args)
            runs = [simulate(cfg, algo, args, seed) for seed in args.seeds]
            key = f"{name or 'defaults'} | max_staleness {s}"
            results[key] = runs
            print(_row(key, runs), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))


def _row(key: str, runs: list[dict[str, Any]]) -> str:
    def ms(name: str, fmt: str = ".2f") -> str:
        m, sd = mean_sd([r[name] for r in runs])
        return f"{m:{fmt}}±{sd:{fmt}}"

    drops: Counter[str] = Counter()
    for r in runs:
        drops.update(r["drops"])
    drop_text = ", ".join(f"{k} {v / len(runs):.0f}" for k, v in sorted(drops.items())
                          if "/" not in k and k != "reuse_exhausted") or "none"
    frac = {b: statistics.fmean(r["trained_fraction"].get(b, math.nan) for r in runs)
            for b in sorted({b for r in runs for b in r["trained_fraction"]},
                            key=lambda x: int(x[3:]))}
    st = {q: statistics.fmean(r["token_staleness"][q] for r in runs) for q in ("p50", "p99", "max")}
    return (f"{key}: episodes/min {ms('episodes_per_min')}, idle {ms('idle_pct', '.1f')} %, "
            f"trained/generated mean length {ms('length_ratio', '.3f')} "
            f"({statistics.fmean(r['trained_mean'] for r in runs):.1f} / "
            f"{statistics.fmean(r['generated_mean'] for r in runs):.1f} steps); drops/run: "
            f"{drop_text}; trained fraction "
            + " ".join(f"{b} {v:.2f}" for b, v in frac.items())
            + f"; token staleness p50 {st['p50']:.1f} p99 {st['p99']:.1f} max {st['max']:.1f}")


if __name__ == "__main__":
    main()

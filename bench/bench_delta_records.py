"""Delta step records against whole ones: bytes per episode, buffer ingest CPU per step and
learner decode time at 8 / 32 / 100 steps, in one run.

    .venv/bin/python -m bench.bench_delta_records                      # ~1 minute on 2 cores
    .venv/bin/python -m bench.bench_delta_records --prompt-tokens 512 --obs-tokens 0 \\
        --action-tokens 512 --steps 32                                 # the capacity model's shape

Episodes are built by the real rollout path's encoder (`wire/delta.py`'s `DeltaEncoder`, as
`actors/rollout.py` uses it) over a `full`-builder history: a prompt, then per step an action
of `--action-tokens` and an observation of `--obs-tokens` joining the context. Per shape and
mode (whole: `actors.delta_records=false`; delta: the default), as the median of `--repeats`
interleaved repeats:
- bytes: the episode's StepRecord and EpisodeEnd frames (`messages.encode`), against the
  final sequence's own bytes: 4 B per token of the last step's context + action, plus 8 B per
  action token of the episode (the float64 behavior log-prob each carries). The ratio is the
  record format's overhead over what the learner needs.
- ingest µs/step: CPU time (`time.process_time`) of what the buffer service does with each
  record: `unpack_data` (typed decode), `check_record` (range checks; a whole context's
  CRC-32) and `Assembler.add` (assembly, the reference check with the delta's chained CRC),
  per step.
- decode ms/episode: CPU time of the learner's side: `decode_control` of a SampleBatch of
  `--episodes` episodes and `build_rows` (which rebuilds each step's whole context and checks
  its CRC-32).
- buffer bytes: `Assembler` memory accounting (`approx_nbytes`, what `buffer.max_bytes`
  bounds) of one episode held.
Results (stdout and JSON) go to `--out`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from agent_r1_async.buffers.assembly import Assembler, approx_nbytes
from agent_r1_async.buffers.validate import RecordBounds, check_record
from agent_r1_async.learner.batching import build_rows, trainable_groups
from agent_r1_async.wire import messages as m
from agent_r1_async.wire.delta import DeltaEncoder
from bench.stats import load_line

VOCAB = 49152


def episode_records(steps: int, prompt: int, action: int, obs: int, delta: bool, seed: int,
                    episode_id: str = "e0", group_id: str = "g0") -> list[m.StepRecord | m.EpisodeEnd]:
    """One `steps`-step episode's records as an actor sends them (full-context history)."""
    rng = random.Random(seed)
    context = [rng.randrange(VOCAB) for _ in range(prompt)]
    enc = DeltaEncoder(delta)
    out: list[m.StepRecord | m.EpisodeEnd] = []
    for i in range(steps):
        act = [rng.randrange(VOCAB) for _ in range(action)]
        ids, origin, length, crc = enc.encode(i, context, act)
        out.append(m.StepRecord(
            episode_id, group_id, "task", "a0", "bench", i, ids, m.TokenIds(act),
            m.LogProbs([-rng.random() for _ in range(action)]), 0, process_reward=0.01,
            done=i == steps - 1, created_at=1.0, context_from=origin, context_len=length,
            context_crc=crc))
        context = [*context, *act, *(rng.randrange(VOCAB) for _ in range(obs))]
    out.append(m.EpisodeEnd(episode_id, group_id, "task", "a0", "bench", steps, 1.0, "ok", 1,
                            created_at=1.0))
    return out


def measure(steps: int, args: argparse.Namespace, delta: bool) -> dict[str, float]:
    recs = episode_records(steps, args.prompt_tokens, args.action_tokens, args.obs_tokens,
                           delta, seed=steps)
    frames = [m.encode(r) for r in recs]
    last = recs[-2]
    assert isinstance(last, m.StepRecord)
    final_tokens = args.prompt_tokens + steps * args.action_tokens + (steps - 1) * args.obs_tokens
    final_bytes = 4 * final_tokens + 8 * steps * args.action_tokens
    # ingest: decode + range checks + assembly, as the buffer service does per record
    bounds = RecordBounds(vocab_size=VOCAB, max_steps=steps, max_group_size=1)
    asm = Assembler(600.0, 1, 600.0, 5.0)
    t0 = time.process_time()
    for f in frames:
        (msg,) = m.unpack_data([f])
        assert isinstance(msg, m.StepRecord | m.EpisodeEnd)
        reason, _ = check_record(msg, bounds, 1)
        assert not reason, reason
        asm.add(msg, 0.0)
    ingest_s = time.process_time() - t0
    (ready,), _ = asm.drain()
    held = ready.nbytes
    # learner: a SampleBatch of `--episodes` such episodes, decoded and turned into rows
    group = ready.group
    groups = [m.Group(f"g{i}", group.task_id, group.env_name, group.episodes)
              for i in range(args.episodes)]
    frame = m.encode(m.SampleBatch(groups=groups, is_weights=[1.0] * len(groups),
                                   learner_version=1))
    t0 = time.process_time()
    batch = m.decode_control(frame)
    assert isinstance(batch, m.SampleBatch)
    chosen = trainable_groups(batch)
    rows = build_rows(chosen, [[[0.0] * steps]] * len(chosen), [[[0.0] * steps]] * len(chosen))
    decode_s = time.process_time() - t0
    assert len(rows) == steps * args.episodes
    assert len(rows[-1].context_ids) == final_tokens - args.action_tokens
    return {
        "bytes_per_episode": float(sum(len(f) for f in frames)),
        "final_sequence_bytes": float(final_bytes),
        "bytes_over_final": sum(len(f) for f in frames) / final_bytes,
        "buffer_bytes_per_episode": float(held),
        "ingest_us_per_step": 1e6 * ingest_s / steps,
        "decode_ms_per_episode": 1e3 * decode_s / args.episodes,
        "last_record_bytes": float(len(frames[-2])),
        "approx_last_record": float(approx_nbytes(last)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="8,32,100")
    ap.add_argument("--prompt-tokens", type=int, default=470)
    ap.add_argument("--action-tokens", type=int, default=20)
    ap.add_argument("--obs-tokens", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=8, help="episodes per decoded SampleBatch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench/results/delta_records")
    args = ap.parse_args()
    lengths = [int(s) for s in args.steps.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load_line()}")
    print(f"# shape: prompt {args.prompt_tokens}, per step action {args.action_tokens} + "
          f"observation {args.obs_tokens} tokens; {args.episodes} episodes per SampleBatch; "
          f"median of {args.repeats} interleaved repeats")
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.repeats):
        for n in lengths:
            for mode in ("whole", "delta"):
                runs.setdefault(f"{n}/{mode}", []).append(measure(n, args, mode == "delta"))
    summary = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
    head = ("steps", "mode", "bytes/episode", "x final seq", "buffer bytes", "ingest µs/step",
            "decode ms/episode")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for n in lengths:
        for mode in ("whole", "delta"):
            s = summary[f"{n}/{mode}"]
            print(f"| {n} | {mode} | {s['bytes_per_episode']:,.0f} | {s['bytes_over_final']:.2f} | "
                  f"{s['buffer_bytes_per_episode']:,.0f} | {s['ingest_us_per_step']:.1f} | "
                  f"{s['decode_ms_per_episode']:.2f} |")
        w, d = summary[f"{n}/whole"], summary[f"{n}/delta"]
        print(f"#   {n} steps: delta/whole bytes {d['bytes_per_episode'] / w['bytes_per_episode']:.3f}"
              f", ingest {d['ingest_us_per_step'] / w['ingest_us_per_step']:.2f}x, decode "
              f"{d['decode_ms_per_episode'] / w['decode_ms_per_episode']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"p{args.prompt_tokens}_a{args.action_tokens}_o{args.obs_tokens}"
    (out / f"{tag}.json").write_text(json.dumps(
        {"args": vars(args), "load": load_line(), "summary": summary, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

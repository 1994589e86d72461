"""Learner MFU on this CPU: model FLOP/s of an update against the fastest matmul peak (bf16 or
fp32) measured in the same run, fp32 vs bf16, with the update's time broken down by phase.

    .venv/bin/python -m bench.bench_learner_mfu                          # default config, ~4 min
    .venv/bin/python -m bench.bench_learner_mfu --config configs/multihop.yaml --context 560 --action 30
    .venv/bin/python -m bench.bench_learner_mfu --threads 2 --steps 3
    .venv/bin/python -m bench.bench_learner_mfu --arms fp32 bf16 --steps 1   # bf16 emulated: slow

Method (one process, `--threads` torch threads; a launch's learner runs on 1, the default):
- peak: the best of 5 one-second runs of 2048 × 2048 matmuls, bf16 and fp32 (2·n³ FLOPs each);
- the learner: `PolicyTrainer` from `--config` four times: `fp32` (`learner.bf16` false),
  `bf16` (true: forward and backward on the bf16 working copy of the weights, the default),
  `autocast` (true with `learner.bf16_copy` false: plain autocast over the fp32 weights) and
  `compiled` (`bf16` with `learner.compile`: inductor-compiled decoder layers; its compile
  falls in the warm-up); fp32 master weights and AdamW state in all four; on one synthetic
  batch of `--rows` steps of `--context` + `--action` tokens (random ids: the cost does not
  depend on them), micro-batched as the config says.
  The arms alternate for `--steps` updates after a warm-up, the order flipping each step, so
  machine load hits all of them.
- phases of an update: packing (`make_micro_batches`), forward and backward (the trainer's own
  clock, `time_forward_s` / `time_backward_s`; forward includes the loss), optimizer (clip +
  AdamW), publish (`published_state_dict` in the engines' dtype); the LM head alone (head +
  sampling log-softmax over the batch's action tokens, forward + backward, chunked as the
  config says) is timed separately on the same hidden-state shape, a part of forward+backward.
- model FLOPs per update: 6 · (N_body · tokens + N_head · action tokens), N_body = parameters
  without the embedding and the head, N_head = the head matrix (the learner applies it to
  action tokens only); recomputation (activation checkpointing) and attention's T² term are
  not counted, as MFU conventionally does.
- MFU = model FLOPs / (forward + backward seconds) / the machine's peak FLOP/s: the faster of
  the two measured peaks (bf16 where the CPU multiplies bf16 faster than fp32, fp32 where it
  does not), so every arm is measured against what this CPU can do at best; "update MFU"
  divides by the whole update (packing + forward + backward + optimizer) instead.
Medians over the timed steps; the ratio lines are per step: fp32, autocast and bf16 each over
bf16 or compiled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.learner_common import MODEL, flops_params, synthetic_rows
from bench.stats import fmt_spread

ROOT = Path(__file__).resolve().parents[1]

PHASES = ("pack", "forward", "backward", "optimizer", "publish", "head")


def matmul_peak(dtype: Any, n: int = 2048, seconds: float = 1.0, repeats: int = 5) -> float:
    """Best FLOP/s of `repeats` runs of back-to-back n × n matmuls lasting `seconds` each."""
    import torch

    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up: kernel selection, page faults
    best = 0.0
    for _ in range(repeats):
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            torch.mm(a, b)
            count += 1
        best = max(best, 2 * n**3 * count / (time.perf_counter() - t0))
    return best


class Arm:
    """One precision: a trainer and the per-step phase seconds measured on it."""

    def __init__(self, name: str, bf16: bool, args: argparse.Namespace, model_path: str,
                 extra: tuple[str, ...] = ()) -> None:
        import torch

        from agent_r1_async.config import load_config
        from agent_r1_async.learner.trainer import PolicyTrainer

        self.name = name
        torch.manual_seed(0)
        overrides = [f"learner.bf16={str(bf16).lower()}", "learner.device=cpu",
                     f"engine.dtype={'bfloat16' if bf16 else 'float32'}", *extra, *args.overrides]
        self.cfg = load_config(args.config, overrides)
        self.trainer = PolicyTrainer(self.cfg, model_path)
        self.seconds: dict[str, list[float]] = {p: [] for p in PHASES}

    def step(self, rows: list[Any], record: bool) -> None:
        import torch

        from agent_r1_async.learner.batching import make_micro_batches
        from agent_r1_async.learner.logprobs import head_logprobs

        tr, lc = self.trainer, self.cfg.learner
        t0 = time.perf_counter()
        mbs = make_micro_batches(rows, lc.micro_batch_tokens, tr.pad_id)
        pack = time.perf_counter() - t0
        if tr.needs_proximal_pass(lc.ppo_epochs):
            tr.proximal_pass(mbs)
        m = tr.optimize(mbs, version=0)
        t0 = time.perf_counter()
        tr.published_state_dict(tr.publish_dtype)
        publish = time.perf_counter() - t0
        # The LM head alone on this batch's action positions: the same head, chunking,
        # sampling softmax and autocast as the trainer's forward, forward + backward.
        lm = tr._causal_lm()
        n = sum(mb.num_action_tokens for mb in mbs)
        hidden = torch.randn(n, lm.config.hidden_size, requires_grad=True)
        targets = torch.randint(0, lm.config.vocab_size, (n,))
        t0 = time.perf_counter()
        with tr._autocast():
            lp, _ = head_logprobs(lm.get_output_embeddings(), hidden, targets, False,
                                  self.cfg.engine.temperature, self.cfg.engine.top_p,
                                  chunk=lc.head_chunk_tokens)
        lp.sum().backward()
        head = time.perf_counter() - t0
        tr.optimizer.zero_grad(set_to_none=True)
        if record:
            for k, v in (("pack", pack), ("forward", m["time_forward_s"]),
                         ("backward", m["time_backward_s"]),
                         ("optimizer", m["time_optimizer_s"]), ("publish", publish),
                         ("head", head)):
                self.seconds[k].append(v)

    def median(self, phase: str) -> float:
        return statistics.median(self.seconds[phase])

    def fb(self) -> list[float]:
        return [f + b for f, b in zip(self.seconds["forward"], self.seconds["backward"], strict=True)]

    def update(self) -> list[float]:
        return [sum(self.seconds[p][i] for p in ("pack", "forward", "backward", "optimizer"))
                for i in range(len(self.seconds["forward"]))]


ARMS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "fp32": (False, ()), "bf16": (True, ()), "autocast": (True, ("learner.bf16_copy=false",)),
    "compiled": (True, ("learner.compile=true",))}
"""Each arm's `learner.bf16` and its other overrides."""
PAIRS = (("fp32", "bf16"), ("autocast", "bf16"), ("bf16", "compiled"), ("autocast", "compiled"))
"""The speed-ups printed: (slower, faster) arm names, each where both ran."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--rows", type=int, default=12)
    ap.add_argument("--context", type=int, default=320)
    ap.add_argument("--action", type=int, default=40)
    ap.add_argument("--steps", type=int, default=4, help="timed updates per arm after 1 warm-up")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                    help="the arms to run (where bf16 is emulated, as without AMX-BF16 or "
                         "AVX512-BF16, its three arms take ~8x fp32's time)")
    args = ap.parse_args()

    import torch

    from agent_r1_async.models import resolve_model

    torch.set_num_threads(args.threads)
    model_path = resolve_model(MODEL)
    peak_bf16 = matmul_peak(torch.bfloat16)
    peak_fp32 = matmul_peak(torch.float32)
    peak, peak_name = max((peak_bf16, "bf16"), (peak_fp32, "fp32"))
    arms = [Arm(name, bf16, args, model_path, extra)
            for name, (bf16, extra) in ARMS.items() if name in args.arms]
    named = {arm.name: arm for arm in arms}
    lm = arms[0].trainer._causal_lm()
    rows = synthetic_rows(args.rows, args.context, args.action, lm.config.vocab_size)
    n_all = flops_params(lm)
    head = lm.get_output_embeddings().weight.numel()
    tokens, action = args.rows * (args.context + args.action), args.rows * args.action
    flops = 6 * ((n_all - head) * tokens + head * action)
    for i in range(args.steps + 1):
        for arm in arms if i % 2 == 0 else arms[::-1]:
            arm.step(rows, record=i > 0)
    print(f"## Learner MFU: {Path(args.config).name}, SmolLM2-135M, {args.rows} rows × "
          f"({args.context} + {args.action}) tokens = {tokens} tokens ({action} action), "
          f"{args.threads} thread(s), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"matmul peak ({args.threads} thread(s), 2048²): bf16 {peak_bf16 / 1e9:.0f} GFLOP/s, "
          f"fp32 {peak_fp32 / 1e9:.0f} GFLOP/s (bf16 {peak_bf16 / peak_fp32:.2f}× fp32)")
    print(f"MFU against the fastest peak, {peak_name}: {peak / 1e9:.0f} GFLOP/s")
    print(f"model FLOPs per update: {flops / 1e9:.1f} GFLOP (6·N·tokens, head on action tokens)")
    print(f"{'arm':8} " + " ".join(f"{p + ' s':>11}" for p in PHASES)
          + f" {'fwd+bwd GF/s':>12} {'MFU':>6} {'update MFU':>10}")
    for arm in arms:
        fb, upd = statistics.median(arm.fb()), statistics.median(arm.update())
        print(f"{arm.name:8} " + " ".join(f"{arm.median(p):11.3f}" for p in PHASES)
              + f" {flops / fb / 1e9:12.0f} {flops / fb / peak:6.1%} "
              f"{flops / upd / peak:10.1%}")
    for slow, fast in PAIRS:
        if slow not in named or fast not in named:
            continue
        ratios = [a / b for a, b in zip(named[slow].fb(), named[fast].fb(), strict=True)]
        print(f"speed-up, forward+backward ({slow} s / {fast} s per step): "
              f"{fmt_spread(ratios, unit='×')}")
    for arm in arms:
        print(f"{arm.name} forward+backward seconds: {fmt_spread(arm.fb())}")


if __name__ == "__main__":
    main()

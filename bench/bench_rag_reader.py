"""Naive RAG with a trained reader: the one-retrieval baseline given the same demonstration
budget as the search agent's warm start, on multi-hop QA.

    .venv/bin/python -m bench.bench_rag_reader --seeds 0 1 2

The untrained model reading passages it was never taught to read scores ~0 by format alone;
the baseline the Agent-R1 paper means has a reader trained on RAG prompts. Here:

- **the reader** of seed s: `agent-r1-async sft` on `--demos` reader demonstrations for
  `--epochs` epochs (`sft.demos_source: jsonl`, `learner.seed` s). Each demonstration is the
  baseline's own prompt for a train-split question (its top-k BM25 passages, then the
  question) followed by the gold answer in the answer format
  (`python -m agent_r1_async.envs.multihop.naive_rag --demos-out`), the questions drawn in
  the order the oracle warm start of demo seed s draws them. `--demos` and `--epochs` default
  to best SFT of the multi-hop sweep (bench/results/sft_vs_rl/multihop/best.json) where it
  exists, else the config's `sft.num_demos` and `sft.epochs`: the search agent's budget.
- **k on dev**: each reader is trained on prompts of `--train-k` passages; seed 0's is
  evaluated on all dev tasks with each `--ks` value (sampling seed 0); best k: the highest EM
  (ties: the smaller k).
- **test**: each seed's reader at best k on all test tasks at sampling seed s; and, at
  sampling seed 0, the untrained model's two baselines (Base Tool Call: the search agent's
  prompt; Naive RAG at best k), with `answer_in_output` (a gold answer anywhere in the last
  action, tags or not) beside EM, as format alone zeroes their EM.

Output (`--out`, default bench/results/rag_reader): results.json (every evaluation: EM, F1,
format_ok, answer_in_output, its episode rows' path), table.md, evals/*.jsonl, logs/. A stage
already in results.json is not run again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from agent_r1_async.config import load_config
from bench.bench_sft_vs_rl import sft
from bench.cli_runs import ROOT, cli, python_exe, run_logged, sets
from bench.stats import load_line, mean_sd

METRICS = ("em", "f1", "format_ok", "answer_in_output")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _save(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, sort_keys=True))


def evaluate(args: argparse.Namespace, name: str, model: str, split: str, seed: int,
             baseline: str, k: int) -> dict[str, Any]:
    """`agent-r1-async eval --baseline BASELINE` on every task of `split`: the mean of each
    of METRICS over its episodes (a failed episode counts 0)."""
    rows_path = args.out / "evals" / f"{name}.jsonl"
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    run_logged(cli("eval", "--config", str(args.config), "--model", model, "--split", split,
                   "--num-tasks", "100000", "--baseline", baseline, "--rag-k", str(k),
                   "--episodes-out", str(rows_path),
                   *sets([*args.overrides, f"launch.seed={seed}"])),
               args.out / "logs" / f"eval-{name}.log")
    rows = [json.loads(x) for x in rows_path.read_text().splitlines()]
    out: dict[str, Any] = {m: sum(float(r["metrics"].get(m, 0.0)) for r in rows) / len(rows)
                           for m in METRICS}
    return {**out, "episodes": len(rows), "split": split, "seed": seed, "k": k,
            "rows": str(rows_path.relative_to(ROOT) if rows_path.is_relative_to(ROOT)
                        else rows_path)}


def reader(args: argparse.Namespace, seed: int, k: int) -> str:
    """Seed `seed`'s reader at `k` passages: its demonstrations, then SFT; its checkpoint."""
    demos = args.out / "demos" / f"s{seed}-k{k}.jsonl"
    demos.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python_exe(), "-m", "agent_r1_async.envs.multihop.naive_rag",
                    "--demos-out", str(demos), "--num-demos", str(args.demos),
                    "--seed", str(seed), "--k", str(k)], cwd=ROOT, check=True)
    ckpt, _ = sft(args, f"reader-s{seed}-k{k}", [
        "sft.demos_source=jsonl", f"sft.jsonl_path={demos}", f"sft.num_demos={args.demos}",
        f"sft.epochs={args.epochs}", f"learner.seed={seed}"])  # the file is in seed s's order
    return ckpt


def budget(args: argparse.Namespace) -> tuple[int, int, str]:
    """(demos, epochs, where they come from)."""
    best = _load(ROOT / "bench" / "results" / "sft_vs_rl" / "multihop" / "best.json")
    cfg = load_config(args.config, args.overrides)
    demos = args.demos or best.get("demos") or cfg.sft.num_demos
    epochs = args.epochs or best.get("epochs") or cfg.sft.epochs
    source = ("--demos/--epochs" if args.demos and args.epochs else
              "best SFT of the multi-hop sweep" if best else f"{args.config.name}'s sft section")
    return int(demos), int(epochs), source


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = args.out / "results.json"
    res = _load(path)
    res.update(demos=args.demos, epochs=args.epochs, budget_from=args.budget_from)

    def stage(key: str, make: Any) -> Any:
        if key not in res:
            res[key] = make()
            _save(path, res)
            print(f"{key}: {json.dumps(res[key])}; {load_line()}", flush=True)
        return res[key]

    tk = args.train_k
    res["train_k"] = tk
    for s in args.seeds:
        stage(f"reader s{s}", lambda s=s: reader(args, s, tk))
    for k in args.ks:
        stage(f"dev s0 k{k}", lambda k=k: evaluate(args, f"dev-s0-k{k}", res["reader s0"],
                                                   "dev", 0, "naive_rag", k))
    best_k = max(args.ks, key=lambda k: (res[f"dev s0 k{k}"]["em"], -k))
    res["best_k"] = best_k
    for s in args.seeds:
        stage(f"test s{s}", lambda s=s: evaluate(args, f"test-s{s}-k{best_k}",
                                                 res[f"reader s{s}"], "test", s, "naive_rag",
                                                 best_k))
    base = load_config(args.config, args.overrides).model.name_or_path
    stage("untrained naive_rag", lambda: evaluate(args, f"untrained-rag-k{best_k}", base,
                                                  "test", 0, "naive_rag", best_k))
    stage("untrained base_tool_call", lambda: evaluate(args, "untrained-tool", base, "test", 0,
                                                       "base_tool_call", 0))
    _save(path, res)
    return res


def table(res: dict[str, Any], seeds: list[int]) -> str:
    best_k = res["best_k"]
    lines = [f"# Naive RAG with a trained reader ({res['demos']} demonstrations × "
             f"{res['epochs']} epochs, from {res['budget_from']}; trained on top-"
             f"{res['train_k']} prompts); multi-hop QA", "",
             "## k on dev (seed 0's reader, all dev tasks)", "",
             "| k | EM | F1 | format_ok |", "|---|---|---|---|"]
    for key in sorted((k for k in res if k.startswith("dev s0 k")),
                      key=lambda x: int(x.split("k")[-1])):
        r = res[key]
        lines.append(f"| {r['k']} | {r['em']:.3f} | {r['f1']:.3f} | {r['format_ok']:.3f} |")
    tests = [res[f"test s{s}"] for s in seeds if f"test s{s}" in res]
    lines += ["", f"## Test (all tasks), k = {best_k}", "",
              "| row | seeds | EM | F1 | format_ok | answer in output |", "|---|---|---|---|---|---|"]
    if tests:
        cells = []
        for m in METRICS:
            mean, sd = mean_sd([t[m] for t in tests])
            cells.append(f"{mean:.3f} ± {sd:.3f}" if len(tests) > 1 else f"{mean:.3f}")
        per = ", ".join(f"{t['em']:.3f}" for t in tests)
        lines.append(f"| Naive RAG, trained reader (EM per seed {per}) | {len(tests)} | "
                     + " | ".join(cells) + " |")
    for key, label in (("untrained naive_rag", f"Naive RAG, untrained model, k = {best_k}"),
                       ("untrained base_tool_call", "Base Tool Call, untrained model")):
        if key in res:
            r = res[key]
            lines.append(f"| {label} | 1 | " + " | ".join(f"{r[m]:.3f}" for m in METRICS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multihop.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rag_reader")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--train-k", type=int, default=8,
                    help="passages in the readers' training prompts")
    ap.add_argument("--demos", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=0)
    args = ap.parse_args()
    args.demos, args.epochs, args.budget_from = budget(args)
    print(f"# Naive RAG reader: {args.demos} demonstrations × {args.epochs} epochs "
          f"({args.budget_from}); ks {args.ks}; seeds {args.seeds}; {load_line()}", flush=True)
    res = run(args)
    (args.out / "table.md").write_text(table(res, args.seeds))
    print(table(res, args.seeds))
    print(f"# done; {load_line()}; mean EM over seeds "
          f"{statistics.fmean(res[f'test s{s}']['em'] for s in args.seeds):.3f}")


if __name__ == "__main__":
    main()

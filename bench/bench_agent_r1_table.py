"""The Agent-R1 table in miniature: test-split EM/F1 on multi-hop QA of two baselines with the
untrained model, the same two with the warm-started policy, and RL (GRPO, PPO with step-level
GAE, REINFORCE++, RLOO) from that warm start, compared seed by seed with 95 % intervals.

    .venv/bin/python -m bench.bench_agent_r1_table                     # the full table
    .venv/bin/python -m bench.bench_agent_r1_table --budget-s 600 --algos grpo --seeds 0
    .venv/bin/python -m bench.bench_agent_r1_table --credit-ablation   # GRPO: credit x process
    .venv/bin/python -m bench.bench_agent_r1_table --summarize OUT     # table.md from results.json

Split. Every row is EM (and F1) on all tasks of `--split` (default test: 145 tasks of the
shipped synthetic corpus; `--final-tasks N` for the first N), sampled at eval.temperature with
the run's seed (`launch.seed`, also actors.seed and buffer.seed), so a seed fixes the
episodes. The dev split (143 tasks, `env.eval_split`) is the tuning split: the warm start's
length in configs/multihop.yaml is chosen on it, and the curve each launch records during RL
(a fixed subset of `--eval-tasks` dev tasks every `--eval-every` versions, eval.every_updates)
evaluates on it; no final number comes from it unless `--split dev` asks. The split, its
task count and the corpus version (the data directory's VERSION) are in results.json and
table.md.

Rows, in this order:

- Base Tool Call (untrained): `model.name_or_path` with the search tool prompt
  (`agent-r1-async eval --baseline base_tool_call`).
- Naive RAG (untrained, k=K): the untrained model with the top-K BM25 passages for the
  question in the prompt, one turn, no tool (`--baseline naive_rag`; K = `--rag-k`, default 8).
- Base Tool Call (warm start): the supervised oracle warm start every RL run starts from
  (trained once, cached) with the tool prompt: the policy before RL.
- Naive RAG (warm start, k=K): the same checkpoint as the Naive RAG reader.
- GRPO, PPO (step GAE), REINFORCE++, RLOO: one `agent-r1-async launch` per algorithm and seed,
  all from the warm-start checkpoint (`model.init_from`) with the same RL wall-clock budget
  (`launch.max_wall_time_s` = `--budget-s`, default 1800 s: the launch's clock starts with the
  RL loop, after start-up, and the update in flight when it runs out completes); the final
  checkpoint is evaluated like the rows above.

The four baseline rows and GRPO run at every `--seeds` seed, the other algorithms at the first
`--other-seeds`; `--skip-baselines` leaves out all baselines but Base Tool Call (warm start),
which the RL gains need. Beside the Naive RAG rows the table gives the retrieval recall of
top-K on the reported split (`naive_rag.retrieval_recall`): the share of questions whose K
passages hold the answer, and hold both gold supporting passages, which bounds what a reader
of one retrieval can answer.

Statistics. EM and F1 cells are mean ± sample sd over seeds. A comparison pairs two rows seed
by seed (a seed fixes the sampling seed, and every row shares the one warm start): the
per-seed EM differences, their mean and its two-sided 95 % Student t interval
(bench/stats.py), and whether the interval excludes 0 (at least two common seeds). The table
compares GRPO with Naive RAG (warm start), Base Tool Call (warm start) and Base Tool Call
(untrained), and every RL row with the warm start at the same seed (its gain from RL).

Evaluation noise. `--eval-repeats N` (default 3; under 2: none) evaluates the warm start at
the first seed N times on the reported split with sampling seeds seed, seed+1000,
seed+2000, ... (the first is its row's own evaluation); table.md states the N EMs and their
max-min spread, how far one evaluation of one checkpoint moves with the sampling seed alone.
It is kept in results.json under "eval_noise" and feeds no row.

`--credit-ablation` (same --out as the table, after it; writes OUT/ablation/): GRPO with
algorithm.credit token instead of step, and with process rewards off
(env.args.gold_retrieval_reward and valid_call_reward 0; `--ablation-arms token` runs only the
first), one factor at a time, same warm
start, seeds, budget and split; the step / process-on arm is the table's GRPO row
(configs/multihop.yaml's own setting) and the warm-start row the table's, not run again.
Each arm is compared with the step / process-on arm, paired by seed as above.

Writes OUT/table.md, OUT/em_vs_time.png (EM vs RL wall-clock per run: the dev-subset curve,
then the final checkpoint on the reported split) and OUT/results.json. With an existing OUT
the bench adds to it and skips what is done (same split, task count and corpus version, else
it stops); `--summarize OUT` rebuilds table.md and the plot from results.json without running
anything. Results files whose rows still carry the former labels (Base Tool Call, Naive RAG,
Warm start (SFT), all on dev) are read with those mapped to the rows above.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.report import read_metrics
from agent_r1_async.run.output.run_dir import created_at
from bench.cli_runs import cli as _cli
from bench.cli_runs import python_exe as _python
from bench.cli_runs import run_logged as _run
from bench.cli_runs import sets as _sets
from bench.stats import mean_sd, utc_date
from bench.stats import paired_diffs as paired_stats

ROOT = Path(__file__).resolve().parents[1]

BASE_UNTRAINED = "Base Tool Call (untrained)"
BASE_WARM = "Base Tool Call (warm start)"
"""The warm-started policy with the tool, no RL: every RL run's starting point."""
ALGOS = {"grpo": "GRPO", "ppo": "PPO (step GAE)", "reinforce_pp": "REINFORCE++", "rloo": "RLOO"}
PROCESS_OFF = ["env.args.gold_retrieval_reward=0", "env.args.valid_call_reward=0"]
SAME_AS_GRPO = "GRPO credit=step, process on"
"""configs/multihop.yaml's own setting: with the table's results in the same --out, its GRPO
runs are this arm's (same warm start, seeds and budget), not run again."""
ABLATION_ARMS = {"token": "GRPO credit=token, process on",
                 "process-off": "GRPO credit=step, process off"}
"""`--ablation-arms` name -> the arm's label; each is compared with SAME_AS_GRPO."""
ABLATION = {  # label -> overrides (GRPO); one factor at a time against the table's GRPO
    SAME_AS_GRPO: ["algorithm.credit=step"],
    ABLATION_ARMS["token"]: ["algorithm.credit=token"],
    ABLATION_ARMS["process-off"]: ["algorithm.credit=step", *PROCESS_OFF],
}
OLD_LABELS = {"Base Tool Call": BASE_UNTRAINED, "Naive RAG": "Naive RAG (untrained, k=env top_k)",
              "Warm start (SFT)": BASE_WARM}
"""Row labels of earlier results files (dev split, Naive RAG at the env's top_k) -> today's."""
SAME_SETUP = ("split", "final_tasks", "corpus_version")
"""What an existing OUT must share with a new invocation to be added to."""
NOISE_SEED_STEP = 1000
"""Sampling seeds of the evaluation-noise repeats: seed, seed + 1000, seed + 2000, ..."""


def rag_label(model: str, k: int) -> str:
    """The Naive RAG row of `model` ("untrained" or "warm start") at k passages."""
    return f"Naive RAG ({model}, k={k})"


def split_setup(args: argparse.Namespace) -> dict[str, Any]:
    """The reported split's setup, read here (the env's data and BM25 index, no model):
    `final_tasks` (all tasks of `--split`, or the first `--final-tasks`), `corpus_version`,
    `rag_k` (`--rag-k`, 0 = the env's top_k) and the retrieval recall of top-`rag_k` on those
    tasks."""
    from agent_r1_async.config import load_config
    from agent_r1_async.envs.multihop.naive_rag import retrieval_recall
    from agent_r1_async.envs.registry import get_env_spec

    spec = get_env_spec(load_config(str(args.config), args.overrides).env)
    tasks = spec.tasks(args.split)
    n = min(args.final_tasks, len(tasks)) if args.final_tasks > 0 else len(tasks)
    k = args.rag_k or spec.args.top_k
    recall = retrieval_recall(spec.definition.index, tasks[:n], k)
    return {"split": args.split, "final_tasks": n,
            "corpus_version": getattr(spec.definition, "corpus_version", ""), "rag_k": k,
            "recall": {"k": k, "tasks": recall.tasks, "answer": recall.answer,
                       "support": recall.support}}


def final_eval(args: argparse.Namespace, tag: str, seed: int, kind: str = "",
               model: str = "") -> dict[str, Any]:
    """One evaluation on the `args.final_tasks` first tasks of `args.split` (all of them by
    default) at sampling seed `seed`: a baseline (`kind`; naive_rag with `args.rag_k`
    passages), or a checkpoint (`model`: the warm start, an RL run's final weights), or both
    (naive_rag read by the warm start). evaluate()'s dict plus "split" (and "rag_k")."""
    res = args.out / f"{tag}-s{seed}.json"
    code = ("import json,sys; from agent_r1_async.config import load_config; "
            "from agent_r1_async.run.evaluate import evaluate; "
            f"cfg = load_config({str(args.config)!r}, {[*args.overrides, f'launch.seed={seed}']!r}); "
            f"r = evaluate(cfg, {args.split!r}, {args.final_tasks}, model_path={model or None!r}, "
            f"baseline={kind!r}, rag_k={args.rag_k}); open({str(res)!r}, 'w').write(json.dumps(r))")
    _run([_python(), "-c", code], args.out / f"{tag}-s{seed}.log")
    extra = {"rag_k": args.rag_k} if kind == "naive_rag" else {}
    return {**json.loads(res.read_text()), "split": args.split, **extra}


def warm_start_checkpoint(args: argparse.Namespace) -> str:
    """Train (or reuse from the cache) the config's warm start; its checkpoint path."""
    code = ("from agent_r1_async.config import load_config; "
            "from agent_r1_async.run.warm_start import warm_start; "
            f"cfg = load_config({str(args.config)!r}, {args.overrides!r}); "
            "print('CKPT=' + warm_start(cfg, print))")
    out = _run([_python(), "-c", code], args.out / "warm_start.log")
    return out.split("CKPT=")[-1].strip()


def rl_run(args: argparse.Namespace, name: str, seed: int, ckpt: str, extra: list[str],
           before: dict[str, Any]) -> dict[str, Any]:
    """One launch from the warm start `ckpt`, then its final checkpoint on the reported split.
    `before`: the warm start's own result at this seed (the Base Tool Call (warm start) row;
    evaluated once per seed, not again in every launch: `eval.in_launch` is off). The
    launch's periodic curve (`eval.every_updates`) evaluates `env.eval_split`: dev."""
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    sets = [*args.overrides, f"model.init_from={ckpt}", f"launch.name={name}-s{seed}",
            f"launch.seed={seed}", f"actors.seed={seed}", f"buffer.seed={seed}",
            f"launch.max_wall_time_s={args.budget_s}", "learner.total_updates=100000",
            "eval.in_launch=false", f"eval.every_updates={args.eval_every}",
            f"eval.every_num_tasks={args.eval_tasks}", f"launch.run_root={args.out / 'runs'}",
            *extra]
    t_start = time.time()
    stdout = _run(_cli("launch", "--config", str(args.config), *_sets(sets)),
                  args.out / f"{name}-s{seed}.log")
    run_dir = Path(stdout.split("[launch] run directory: ")[-1].strip())
    final = latest_checkpoint(str(run_dir))
    if final is None:
        raise SystemExit(f"{run_dir}: no checkpoint to evaluate")
    after = final_eval(args, f"{name}-after", seed, model=str(final))
    return {**summarize_run(run_dir, before, after, clock_offset_s(run_dir, t_start)),
            "split": args.split}


def clock_offset_s(run_dir: Path, t_start: float) -> float:
    """Seconds from the launch command's start (`t_start`, epoch) to the run's own clock:
    metrics.jsonl's "time" counts from the run directory's creation (`run_dir.created_at`)."""
    return max(0.0, created_at(run_dir) - t_start)


def summarize_run(run_dir: Path, before: dict[str, Any], after: dict[str, Any],
                  offset_s: float = 0.0) -> dict[str, Any]:
    """Before/after EM and F1 and the curve against the launch's wall clock:
    metrics.jsonl's "time" (seconds on the run's clock) plus `offset_s`, the seconds before
    that clock started, so the curve's minutes include start-up (the engine, the learner,
    the first group), which `launch.max_wall_time_s` does not count. The curve is the
    periodic dev-subset evaluations, then `after` (the final checkpoint, reported split)."""
    rows = read_metrics(run_dir)
    t_update = {int(r["update"]): r["time"] + offset_s for r in rows if "learner/loss" in r}
    t_update[0] = 0.0
    curve = [(t_update.get(int(r["update"]), float("nan")) / 60, r["eval/periodic/em"])
             for r in rows if "eval/periodic/em" in r]
    if not curve:  # no periodic evaluation: start from the warm start's own result
        curve = [(0.0, before["em"])]
    last = max(t_update)
    curve.append((t_update[last] / 60, after["em"]))  # the final point (reported split)
    return {"run": str(run_dir), "before_em": before["em"], "before_f1": before["f1"],
            "em": after["em"], "f1": after["f1"], "updates": last,
            "rl_min": t_update[last] / 60, "curve": curve,
            "hacking_no_tool_score": after.get("hacking_no_tool_score", float("nan"))}


# --- statistics ---------------------------------------------------------------------------


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any] | None:
    """EM of `a` minus EM of `b` at each seed both ran (same sampling seed, same warm start),
    in seed order, as `paired_stats`; None when they share no seed."""
    by_seed = {r["seed"]: r["em"] for r in b if "seed" in r}
    pairs = sorted((r["seed"], r["em"] - by_seed[r["seed"]]) for r in a
                   if r.get("seed") in by_seed)
    if not pairs:
        return None
    return paired_stats([s for s, _ in pairs], [d for _, d in pairs])


def gain(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """EM after RL minus the warm start's EM at the same seed (`before_em`), per run, as
    `paired_stats`; None without runs."""
    pairs = sorted((r.get("seed", -1), r["em"] - r["before_em"]) for r in results)
    if not pairs:
        return None
    return paired_stats([s for s, _ in pairs], [d for _, d in pairs])


def fmt_paired(p: dict[str, Any]) -> str:
    """'paired by seed (0, 1, 2): ΔEM +a, +b, +c; mean +m, 95 % CI [+lo, +hi]: excludes 0'."""
    seeds = ", ".join(str(s) for s in p["seeds"])
    head = f"paired by seed ({seeds}): ΔEM {', '.join(f'{d:+.3f}' for d in p['diffs'])}"
    if len(p["diffs"]) < 2:
        return f"{head}; one common seed: no interval"
    verdict = "excludes 0" if p["excludes_zero"] else "includes 0"
    return f"{head}; mean {p['mean']:+.3f}, 95 % CI [{p['lo']:+.3f}, {p['hi']:+.3f}]: {verdict}"


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], name_a: str, name_b: str) -> str:
    """The verdict line of `name_a` vs `name_b`: mean EMs, then the paired interval."""
    ma, mb = statistics.fmean(r["em"] for r in a), statistics.fmean(r["em"] for r in b)
    p = paired(a, b)
    return (f"{name_a} vs {name_b}: EM {ma:.3f} vs {mb:.3f}; "
            + (fmt_paired(p) if p else "no seed in common: not compared"))


def paired_gain(results: list[dict[str, Any]], label: str) -> str:
    """`label`'s gain over the warm start at the same seed, with its 95 % interval."""
    p = gain(results)
    return f"{label} minus {BASE_WARM} at the same seed: " + (fmt_paired(p) if p else "no runs")


def noise_line(noise: dict[str, Any]) -> str:
    """'... the same checkpoint evaluated N times: EM a, b, c (spread max-min X)'."""
    evals = sorted(noise["evals"], key=lambda e: e["seed"])
    ems = [e["em"] for e in evals]
    return (f"Evaluation noise ({noise['label']}, {noise['split']}, sampling seeds "
            f"{', '.join(str(e['seed']) for e in evals)}): the same checkpoint evaluated "
            f"{len(ems)} times: EM {', '.join(f'{x:.3f}' for x in ems)} "
            f"(spread max-min {max(ems) - min(ems):.3f})")


# --- the table ----------------------------------------------------------------------------


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    m, sd = mean_sd(xs)
    return f"{m:.3f} ± {sd:.3f}"


def _rank(label: str) -> int:
    """Row order: the untrained baselines, the warm-start baselines, RL, ablation, the rest."""
    fixed = [*ALGOS.values(), *ABLATION]
    if label == BASE_UNTRAINED:
        return 0
    if label.startswith("Naive RAG (untrained"):
        return 1
    if label == BASE_WARM:
        return 2
    if label.startswith("Naive RAG (warm start"):
        return 3
    return 4 + (fixed.index(label) if label in fixed else len(fixed))


def ordered(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """`rows` in table order (stable within a rank: several Naive RAG k keep theirs)."""
    return dict(sorted(rows.items(), key=lambda kv: _rank(kv[0])))


def table(rows: dict[str, list[dict[str, Any]]], title: str,
          recall: dict[str, dict[str, Any]] | None = None, split: str = "test") -> str:
    """The Markdown table: EM, F1 (mean ± sd over seeds), seeds, RL updates and minutes, and
    beside the Naive RAG rows the retrieval recall of their k (`recall`: by str(k))."""
    recall = recall or {}
    lines = [f"### {title}", "",
             f"| method | {split} EM | {split} F1 | seeds | updates | RL min "
             "| answer in top-k | both gold passages in top-k |",
             "|---|---|---|---|---|---|---|---|"]
    for label, results in rows.items():
        if not results:
            continue
        ups = [r["updates"] for r in results if "updates" in r]
        mins = [r["rl_min"] for r in results if "rl_min" in r]
        rl = (f"{statistics.fmean(ups):.0f} | {statistics.fmean(mins):.1f}" if ups else "- | -")
        rec = recall.get(str(results[0].get("rag_k")))
        retrieval = (f"{rec['answer']:.3f} | {rec['support']:.3f}"
                     if rec and label.startswith("Naive RAG") else "- | -")
        lines.append(f"| {label} | {_ms([r['em'] for r in results])} | "
                     f"{_ms([r['f1'] for r in results])} | {len(results)} | {rl} | {retrieval} |")
    return "\n".join(lines)


def upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """A results.json as this bench writes it today: former row labels mapped (OLD_LABELS),
    and the split (dev) and corpus version ("": unknown) of files that predate them."""
    rows = {OLD_LABELS.get(k, k): v for k, v in results["rows"].items()}
    comparisons = [[OLD_LABELS.get(a, a), OLD_LABELS.get(b, b)]
                   for a, b in results.get("comparisons", [])]
    return {**results, "rows": rows, "comparisons": comparisons,
            "split": results.get("split", "dev"),
            "corpus_version": results.get("corpus_version", ""),
            "retrieval_recall": results.get("retrieval_recall", {})}


def render(results: dict[str, Any]) -> str:
    """table.md from a results dict (upgraded)."""
    results = upgrade(results)
    rows = ordered(results["rows"])
    split = results["split"]
    md = [table(rows, results["title"], results["retrieval_recall"], split), "",
          f"Command: `{results['command']}`",
          f"Date: {results['date']}; reported split: {split} ({results['final_tasks']} tasks, "
          f"every row); corpus version {results['corpus_version'] or 'unknown'}; RL budget per "
          f"run: {results['budget_s']:.0f} s wall-clock; the curves in em_vs_time.png "
          "evaluate a dev subset during RL (the tuning split).",
          "Cells: mean ± sd over seeds. Comparisons: EM differences paired by seed, their mean "
          "and 95 % t interval.", ""]
    for a, b in results["comparisons"]:
        if rows.get(a) and rows.get(b):
            md.append(f"- {compare(rows[a], rows[b], a, b)}")
    for label, runs in rows.items():
        if runs and "before_em" in runs[0]:
            md.append(f"- {paired_gain(runs, label)}")
    if results.get("eval_noise", {}).get("evals"):
        md.append(f"- {noise_line(results['eval_noise'])}")
    return "\n".join(md) + "\n"


def plot(rl: dict[str, list[dict[str, Any]]], path: Path, title: str, split: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, results) in enumerate(rl.items()):
        for j, r in enumerate(results):
            # the last point is the final checkpoint on the reported split; the ones before it
            # the periodic evaluations of a fixed dev subset while RL ran
            (*during, (x_end, y_end)) = r["curve"]
            xs, ys = zip(*during, strict=True) if during else ((), ())
            ax.plot(xs, ys, "o-", color=f"C{i}", alpha=0.8, ms=3,
                    label=label if j == 0 else None)
            if during:
                ax.plot([xs[-1], x_end], [ys[-1], y_end], ":", color=f"C{i}", alpha=0.6)
            ax.plot([x_end], [y_end], "*", color=f"C{i}", ms=10)
    ax.set(xlabel="RL wall-clock (min), start-up included",
           ylabel=f"EM (o: dev subset, *: all {split})", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path, results: dict[str, Any], save_results: bool = True) -> str:
    """OUT/table.md and OUT/em_vs_time.png (and OUT/results.json unless `save_results` is
    off: --summarize leaves it as it is); the table's Markdown."""
    if save_results:
        (out / "results.json").write_text(json.dumps(results, indent=1))
    md = render(results)
    (out / "table.md").write_text(md)
    upgraded = upgrade(results)
    rl = {k: v for k, v in ordered(upgraded["rows"]).items() if v and "curve" in v[0]}
    if rl:
        plot(rl, out / "em_vs_time.png", results["title"], upgraded["split"])
    print("\n" + md)
    print(f"wrote {out / 'table.md'}" + (f", {out / 'em_vs_time.png'}" if rl else "")
          + (f", {out / 'results.json'}" if save_results else ""))
    return md


def _add_to(path: Path, setup: dict[str, Any]) -> dict[str, Any]:
    """An existing results.json (upgraded), if it was made on the same split, task count and
    corpus version as `setup`; else stop: one table, one evaluation set."""
    old = upgrade(json.loads(path.read_text()))
    differ = [f"{key} {old.get(key)!r} there, {setup[key]!r} here" for key in SAME_SETUP
              if old.get(key) != setup[key]]
    if differ:
        raise SystemExit(f"{path} holds results of another evaluation set ({'; '.join(differ)}): "
                         "pass a matching --split/--final-tasks or another --out")
    return old


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multihop.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="baseline, GRPO (and ablation) seeds; the other algorithms use the first")
    ap.add_argument("--other-seeds", type=int, default=1, help="seeds of PPO, REINFORCE++, RLOO")
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    ap.add_argument("--budget-s", type=float, default=1800, help="RL wall-clock per run")
    ap.add_argument("--split", default="test",
                    help="the split of every final evaluation (the curve during RL: dev)")
    ap.add_argument("--final-tasks", type=int, default=0,
                    help="tasks of --split per final evaluation (0 = all)")
    ap.add_argument("--eval-every", type=int, default=5, help="eval.every_updates (dev curve)")
    ap.add_argument("--eval-tasks", type=int, default=32, help="eval.every_num_tasks (dev curve)")
    ap.add_argument("--rag-k", type=int, default=8, help="naive RAG passages (0 = env top_k)")
    ap.add_argument("--eval-repeats", type=int, default=3,
                    help="evaluations of the warm start at the first seed (noise; < 2: none)")
    ap.add_argument("--skip-baselines", action="store_true",
                    help="only Base Tool Call (warm start) of the baseline rows")
    ap.add_argument("--credit-ablation", action="store_true")
    ap.add_argument("--ablation-arms", nargs="+", default=list(ABLATION_ARMS),
                    choices=list(ABLATION_ARMS),
                    help="the ablation's arms beside the table's GRPO (credit token; process off)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--summarize", type=Path, default=None, help="rebuild from OUT/results.json")
    args = ap.parse_args()
    if args.summarize:
        write(args.summarize, json.loads((args.summarize / "results.json").read_text()),
              save_results=False)
        return
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    args.out = (args.out or ROOT / "bench" / "results" / f"agent_r1_table-{stamp}").resolve()
    setup = split_setup(args)
    args.final_tasks, args.rag_k = setup["final_tasks"], setup["rag_k"]
    k = args.rag_k
    table_rows: dict[str, list[dict[str, Any]]] = {}
    if args.credit_ablation:  # its own files in OUT/ablation; the table's rows are read only
        if (args.out / "results.json").exists():
            table_rows = _add_to(args.out / "results.json", setup)["rows"]
        args.out = args.out / "ablation"
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "date": utc_date(),
        "budget_s": args.budget_s, "split": setup["split"], "final_tasks": setup["final_tasks"],
        "corpus_version": setup["corpus_version"], "rag_k": k,
        "retrieval_recall": {str(k): setup["recall"]}, "rows": {}, "comparisons": []}
    if (args.out / "results.json").exists():  # an existing OUT: add to it, skip what is done
        old = _add_to(args.out / "results.json", setup)
        results["rows"] = old["rows"]
        results["retrieval_recall"] = {**old["retrieval_recall"], str(k): setup["recall"]}
        if "eval_noise" in old:
            results["eval_noise"] = old["eval_noise"]
        results["command"] = f"{old['command']}; {results['command']}"
    rows = results["rows"]

    def save() -> None:  # after every run: a partial table survives an interrupted bench
        write(args.out, results)

    def done(label: str, seed: int) -> bool:
        return any(r.get("seed") == seed for r in rows.get(label, []))

    def evaluated(label: str, tag: str, seed: int, kind: str = "", model: str = "") -> None:
        if not done(label, seed):
            rows.setdefault(label, []).append(
                {"seed": seed, **final_eval(args, tag, seed, kind=kind, model=model)})
            save()

    def warm(seed: int) -> dict[str, Any]:  # the warm start (tool prompt), once per seed
        evaluated(BASE_WARM, "warm_start", seed, model=ckpt)
        return next(r for r in rows[BASE_WARM] if r["seed"] == seed)

    if args.credit_ablation:
        ckpt = warm_start_checkpoint(args)
        for seed in args.seeds:  # the table's warm-start evaluations, not run again
            for r in table_rows.get(BASE_WARM, []):
                if r["seed"] == seed and not done(BASE_WARM, seed):
                    rows.setdefault(BASE_WARM, []).append(r)
        results["title"] = "Credit ablation (GRPO), multi-hop QA"
        arms = [SAME_AS_GRPO, *(ABLATION_ARMS[a] for a in args.ablation_arms)]
        results["comparisons"] = [(SAME_AS_GRPO, ABLATION_ARMS[a]) for a in ABLATION_ARMS
                                  if a in args.ablation_arms or rows.get(ABLATION_ARMS[a])]
        for label in arms:
            extra = ABLATION[label]
            rows.setdefault(label, [])
            for seed in args.seeds:
                if done(label, seed):
                    continue
                grpo = [r for r in table_rows.get("GRPO", []) if r["seed"] == seed]
                if label == SAME_AS_GRPO and grpo:  # the table's GRPO run is this arm
                    rows[label].append(grpo[0])
                    continue
                tag = "abl-" + label.split(" ", 1)[1].replace(", ", "-").replace(" ", "").replace("=", "")
                rows[label].append({"seed": seed, **rl_run(args, tag, seed, ckpt, extra,
                                                           warm(seed))})
                save()
        return
    results["title"] = "Multi-hop QA (synthetic corpus), SmolLM2-135M-Instruct"
    rag_warm = rag_label("warm start", k)
    results["comparisons"] = [("GRPO", rag_warm), ("GRPO", BASE_WARM), ("GRPO", BASE_UNTRAINED)]
    baselines = [] if args.skip_baselines else args.seeds
    for seed in baselines:
        evaluated(BASE_UNTRAINED, "base_tool_call", seed, kind="base_tool_call")
    for seed in baselines:
        evaluated(rag_label("untrained", k), f"naive_rag-k{k}", seed, kind="naive_rag")
    ckpt = warm_start_checkpoint(args)
    for seed in args.seeds:
        warm(seed)
    for seed in baselines:
        evaluated(rag_warm, f"warm_naive_rag-k{k}", seed, kind="naive_rag", model=ckpt)
    if args.eval_repeats >= 2:  # the same checkpoint, N sampling seeds; feeds no row
        first = args.seeds[0]
        noise = results.setdefault("eval_noise", {"label": BASE_WARM, "split": args.split,
                                                  "checkpoint": ckpt, "evals": []})
        for i in range(args.eval_repeats):
            seed = first + NOISE_SEED_STEP * i
            if any(e["seed"] == seed for e in noise["evals"]):
                continue
            r = warm(first) if i == 0 else final_eval(args, "warm_start-noise", seed, model=ckpt)
            noise["evals"].append({"seed": seed, "em": r["em"], "f1": r["f1"]})
            save()
    seeds0 = args.seeds[: args.other_seeds]
    for algo in args.algos:
        label = ALGOS[algo]
        rows.setdefault(label, [])
        for seed in args.seeds if algo == "grpo" else seeds0:
            if done(label, seed):
                continue
            rows[label].append({"seed": seed, **rl_run(args, f"mh-{algo}", seed, ckpt,
                                                        [f"algorithm.name={algo}"], warm(seed))})
            save()


if __name__ == "__main__":
    main()

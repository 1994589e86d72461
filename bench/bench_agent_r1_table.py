"""The Agent-R1 table in miniature: held-out dev EM/F1 of Base Tool Call, Naive RAG, the warm
start and RL (GRPO, PPO with step-level GAE, REINFORCE++, RLOO) on multi-hop QA.

    .venv/bin/python -m bench.bench_agent_r1_table                     # the full table
    .venv/bin/python -m bench.bench_agent_r1_table --budget-s 600 --algos grpo --seeds 0
    .venv/bin/python -m bench.bench_agent_r1_table --credit-ablation   # GRPO: credit x process

Every number is held-out EM (and F1) on ALL dev tasks of `configs/multihop.yaml` (143 on the
shipped synthetic corpus; `--final-tasks` to cut it), sampled at eval.temperature with the
run's seed (`launch.seed`, also `actors.seed` and `buffer.seed`), so a seed fixes the episodes.

- Base Tool Call: the untrained `model.name_or_path` with the search tool prompt
  (`agent-r1-async eval --baseline base_tool_call`).
- Naive RAG: the untrained model, the top-k BM25 passages for the question in the prompt, one
  turn (`--baseline naive_rag`, k = `--rag-k`, default env.args.top_k).
- Warm start: the supervised oracle warm start every RL run starts from (trained once here,
  cached), evaluated once per seed on the same dev tasks.
- RL rows: one `agent-r1-async launch` per algorithm and seed, all from that same warm-start
  checkpoint (`model.init_from`) and the same RL wall-clock budget (`launch.max_wall_time_s`,
  `--budget-s`: the launch's clock starts with the RL loop, after start-up, and the update in
  flight when it runs out completes), its final checkpoint then evaluated on the
  dev split like the rows above and, during RL, a fixed dev subset every `--eval-every`
  versions (`eval.every_updates`) for the curve.

`--credit-ablation` (same --out as the table, after it; writes OUT/ablation/): GRPO with
algorithm.credit token instead of step, and with process rewards off
(env.args.gold_retrieval_reward and valid_call_reward 0), one factor at a time, same warm
start, seeds and budget; the step / process-on arm is the table's GRPO row
(configs/multihop.yaml's own setting) and the warm-start row the table's, not run again.

Writes OUT/table.md (mean ± std over seeds, and whether a difference exceeds the seed spread),
OUT/em_vs_time.png (held-out EM vs RL wall-clock per run) and OUT/results.json; `--summarize
OUT` rebuilds the table and plot from results.json without running anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.report import read_metrics
from agent_r1_async.run.output.run_dir import created_at
from bench.stats import mean_sd

ROOT = Path(__file__).resolve().parents[1]

ALGOS = {"grpo": "GRPO", "ppo": "PPO (step GAE)", "reinforce_pp": "REINFORCE++", "rloo": "RLOO"}
PROCESS_OFF = ["env.args.gold_retrieval_reward=0", "env.args.valid_call_reward=0"]
ABLATION = {  # label -> overrides (GRPO); one factor at a time against the table's GRPO
    "GRPO credit=step, process on": ["algorithm.credit=step"],
    "GRPO credit=token, process on": ["algorithm.credit=token"],
    "GRPO credit=step, process off": ["algorithm.credit=step", *PROCESS_OFF],
}
SAME_AS_GRPO = "GRPO credit=step, process on"
"""configs/multihop.yaml's own setting: with the table's results in the same --out, its GRPO
runs are this arm's (same warm start, seeds and budget), not run again."""


def _python() -> str:
    venv = ROOT / ".venv/bin/python"
    return str(venv) if venv.exists() else sys.executable


def _cli(*args: str) -> list[str]:
    return [_python(), "-m", "agent_r1_async.cli", *args]


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _run(cmd: list[str], log: Path) -> str:
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log.write_text(out.stdout + "\n--- stderr ---\n" + out.stderr)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(f"failed ({out.returncode}); log: {log}")
    print(f"  done in {time.monotonic() - t0:.0f} s (log: {log})", flush=True)
    return out.stdout


def dev_eval(args: argparse.Namespace, tag: str, seed: int, kind: str = "",
             model: str = "") -> dict[str, Any]:
    """One evaluation on ALL `--final-tasks` dev tasks at `seed`: a baseline (`kind`), or a
    checkpoint (`model`: the warm start, an RL run's final weights). {"em", "f1", ...}"""
    res = args.out / f"{tag}-s{seed}.json"
    code = ("import json,sys; from agent_r1_async.config import load_config; "
            "from agent_r1_async.run.evaluate import evaluate; "
            f"cfg = load_config({str(args.config)!r}, {[*args.overrides, f'launch.seed={seed}']!r}); "
            f"r = evaluate(cfg, 'dev', {args.final_tasks}, model_path={model or None!r}, "
            f"baseline={kind!r}, rag_k={args.rag_k}); open({str(res)!r}, 'w').write(json.dumps(r))")
    _run([_python(), "-c", code], args.out / f"{tag}-s{seed}.log")
    return json.loads(res.read_text())


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
    """One launch from the warm start `ckpt`, then its final checkpoint on all dev tasks.
    `before`: the warm start's own dev result at this seed (evaluated once per seed, not
    again in every launch: `eval.in_launch` is off)."""
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
    after = dev_eval(args, f"{name}-after", seed, model=str(final))
    return summarize_run(run_dir, before, after, clock_offset_s(run_dir, t_start))


def clock_offset_s(run_dir: Path, t_start: float) -> float:
    """Seconds from the launch command's start (`t_start`, epoch) to the run's own clock:
    metrics.jsonl's "time" counts from the run directory's creation (`run_dir.created_at`)."""
    return max(0.0, created_at(run_dir) - t_start)


def summarize_run(run_dir: Path, before: dict[str, Any], after: dict[str, Any],
                  offset_s: float = 0.0) -> dict[str, Any]:
    """Before/after EM and F1 and the held-out curve against the launch's wall clock:
    metrics.jsonl's "time" (seconds on the run's clock) plus `offset_s`, the seconds before
    that clock started, so the curve's minutes include start-up (the engine, the learner,
    the first group), which `launch.max_wall_time_s` does not count."""
    rows = read_metrics(run_dir)
    t_update = {int(r["update"]): r["time"] + offset_s for r in rows if "learner/loss" in r}
    t_update[0] = 0.0
    curve = [(t_update.get(int(r["update"]), float("nan")) / 60, r["eval/periodic/em"])
             for r in rows if "eval/periodic/em" in r]
    if not curve:  # no periodic evaluation: start from the warm start's full-dev result
        curve = [(0.0, before["em"])]
    last = max(t_update)
    curve.append((t_update[last] / 60, after["em"]))  # the final (full dev) point
    return {"run": str(run_dir), "before_em": before["em"], "before_f1": before["f1"],
            "em": after["em"], "f1": after["f1"], "updates": last,
            "rl_min": t_update[last] / 60, "curve": curve,
            "hacking_no_tool_score": after.get("hacking_no_tool_score", float("nan"))}


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    m, sd = mean_sd(xs)
    return f"{m:.3f} ± {sd:.3f}"


def table(rows: dict[str, list[dict[str, Any]]], title: str) -> str:
    lines = [f"### {title}", "", "| method | held-out EM | held-out F1 | seeds | updates | RL min |",
             "|---|---|---|---|---|---|"]
    for label, results in rows.items():
        if not results:
            continue
        ups = [r["updates"] for r in results if "updates" in r]
        mins = [r["rl_min"] for r in results if "rl_min" in r]
        lines.append(
            f"| {label} | {_ms([r['em'] for r in results])} | {_ms([r['f1'] for r in results])} | "
            f"{len(results)} | {statistics.fmean(ups):.0f} | {statistics.fmean(mins):.1f} |"
            if ups else
            f"| {label} | {_ms([r['em'] for r in results])} | {_ms([r['f1'] for r in results])} | "
            f"{len(results)} | - | - |")
    return "\n".join(lines)


def compare(a: list[dict], b: list[dict], name_a: str, name_b: str) -> str:
    """Does the difference in mean EM exceed the seed spread (std_a + std_b)?"""
    ea, eb = [r["em"] for r in a], [r["em"] for r in b]
    (ma, sa), (mb, sb) = mean_sd(ea), mean_sd(eb)
    if len(ea) < 2 or len(eb) < 2:
        return (f"{name_a} vs {name_b}: EM {ma:.3f} vs {mb:.3f}"
                " (fewer than 2 seeds each: no spread to compare against)")
    diff = ma - mb
    spread = sa + sb
    verdict = "exceeds" if abs(diff) > spread else "does not exceed"
    return (f"{name_a} vs {name_b}: ΔEM {diff:+.3f}, which {verdict} the seed spread "
            f"(std sum {spread:.3f}){paired_difference(a, b)}")


def paired_difference(a: list[dict], b: list[dict]) -> str:
    """The EM differences of two arms run at the same seeds (same warm start, same sampling
    seeds), seed by seed, and how many share the mean's sign: what the unpaired spread, which
    counts each evaluation's own seed-to-seed noise twice, cannot show."""
    by_seed = {r["seed"]: r["em"] for r in b if "seed" in r}
    diffs = [r["em"] - by_seed[r["seed"]] for r in a if r.get("seed") in by_seed]
    if len(diffs) < 2:
        return ""
    mean = statistics.fmean(diffs)
    same = sum(1 for d in diffs if d * mean > 0)
    return f"; paired by seed {_per_seed(diffs, f': {same} of {len(diffs)} the same sign')}"


def paired_gain(results: list[dict[str, Any]], label: str) -> str:
    """EM after RL minus the warm start's EM at the same seed (the same sampled episodes'
    seed), per run: the gain that the spread between seeds' warm-start evaluations hides."""
    gains = [r["em"] - r["before_em"] for r in results]
    return f"{label} minus the warm start at the same seed: {_per_seed(gains)}"


def _per_seed(diffs: list[float], note: str = "") -> str:
    """`ΔEM mean ± std (per seed d0, d1, ...NOTE)`; no std for one seed."""
    m, sd = mean_sd(diffs)
    spread = f" ± {sd:.3f}" if len(diffs) > 1 else ""
    return (f"ΔEM {m:+.3f}{spread} "
            f"(per seed {', '.join(f'{d:+.3f}' for d in diffs)}{note})")


def plot(rl: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, results) in enumerate(rl.items()):
        for j, r in enumerate(results):
            # the last point is the final checkpoint on all dev tasks; the ones before it the
            # periodic evaluations of a fixed dev subset while RL ran
            (*during, (x_end, y_end)) = r["curve"]
            xs, ys = zip(*during, strict=True) if during else ((), ())
            ax.plot(xs, ys, "o-", color=f"C{i}", alpha=0.8, ms=3,
                    label=label if j == 0 else None)
            if during:
                ax.plot([xs[-1], x_end], [ys[-1], y_end], ":", color=f"C{i}", alpha=0.6)
            ax.plot([x_end], [y_end], "*", color=f"C{i}", ms=10)
    ax.set(xlabel="RL wall-clock (min), start-up included",
           ylabel="held-out EM (o: dev subset, *: all dev)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(args: argparse.Namespace, results: dict[str, Any]) -> None:
    out = args.out
    (out / "results.json").write_text(json.dumps(results, indent=1))
    order = ["Base Tool Call", "Naive RAG", "Warm start (SFT)", *ALGOS.values(), *ABLATION]
    rows = {k: results["rows"][k] for k in order if k in results["rows"]}
    rows.update(results["rows"])  # anything else after
    md = [table(rows, results["title"]), "", f"Command: `{results['command']}`",
          f"Date: {results['date']}; RL budget per run: {results['budget_s']:.0f} s wall-clock; "
          f"dev tasks: {results['final_tasks']}.", ""]
    for a, b in results.get("comparisons", []):
        if rows.get(a) and rows.get(b):
            md.append(f"- {compare(rows[a], rows[b], a, b)}")
    for label, runs in rows.items():
        if runs and "before_em" in runs[0]:
            md.append(f"- {paired_gain(runs, label)}")
    (out / "table.md").write_text("\n".join(md) + "\n")
    rl = {k: v for k, v in rows.items() if v and "curve" in v[0]}
    if rl:
        plot(rl, out / "em_vs_time.png", results["title"])
    print("\n" + "\n".join(md))
    print(f"wrote {out / 'table.md'}, {out / 'em_vs_time.png'}, {out / 'results.json'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multihop.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="GRPO (and ablation) seeds; the other algorithms use the first")
    ap.add_argument("--other-seeds", type=int, default=1, help="seeds of PPO, REINFORCE++, RLOO")
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    ap.add_argument("--budget-s", type=float, default=1800, help="RL wall-clock per run")
    ap.add_argument("--eval-every", type=int, default=5, help="eval.every_updates")
    ap.add_argument("--eval-tasks", type=int, default=32, help="eval.every_num_tasks")
    ap.add_argument("--final-tasks", type=int, default=143, help="dev tasks (143 = all)")
    ap.add_argument("--rag-k", type=int, default=0, help="naive RAG passages (0 = env top_k)")
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--credit-ablation", action="store_true")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--summarize", type=Path, default=None, help="rebuild from OUT/results.json")
    args = ap.parse_args()
    if args.summarize:
        args.out = args.summarize
        write(args, json.loads((args.summarize / "results.json").read_text()))
        return
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    args.out = (args.out or ROOT / "bench" / "results" / f"agent_r1_table-{stamp}").resolve()
    table_rows: dict[str, list[dict[str, Any]]] = {}
    if args.credit_ablation:  # its own files in OUT/ablation; the table's rows are read only
        if (args.out / "results.json").exists():
            table_rows = json.loads((args.out / "results.json").read_text())["rows"]
        args.out = args.out / "ablation"
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "budget_s": args.budget_s, "final_tasks": args.final_tasks, "rows": {}, "comparisons": []}
    if (args.out / "results.json").exists():  # an existing OUT: add to it, skip what is done
        old = json.loads((args.out / "results.json").read_text())
        results["rows"] = old["rows"]
        results["command"] = f"{old['command']}; {results['command']}"
    rows = results["rows"]

    def save() -> None:  # after every run: a partial table survives an interrupted bench
        write(args, results)

    def done(label: str, seed: int) -> bool:
        return any(r.get("seed") == seed for r in rows.get(label, []))

    def warm(seed: int) -> dict[str, Any]:  # the warm start on all dev tasks, once per seed
        if not done("Warm start (SFT)", seed):
            r = dev_eval(args, "warm_start", seed, model=ckpt)
            rows.setdefault("Warm start (SFT)", []).append({"seed": seed, **r})
            save()
        return next(r for r in rows["Warm start (SFT)"] if r["seed"] == seed)

    if args.credit_ablation:
        ckpt = warm_start_checkpoint(args)
        for seed in args.seeds:  # the table's warm-start evaluations, not run again
            for r in table_rows.get("Warm start (SFT)", []):
                if r["seed"] == seed and not done("Warm start (SFT)", seed):
                    rows.setdefault("Warm start (SFT)", []).append(r)
        results["title"] = "Credit ablation (GRPO), multi-hop QA"
        results["comparisons"] = [
            ("GRPO credit=step, process on", "GRPO credit=token, process on"),
            ("GRPO credit=step, process on", "GRPO credit=step, process off")]
        for label, extra in ABLATION.items():
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
    results["comparisons"] = [("GRPO", "Naive RAG"), ("GRPO", "Base Tool Call"),
                              ("GRPO", "Warm start (SFT)")]
    seeds0 = args.seeds[: args.other_seeds]
    for label, kind in (("Base Tool Call", "base_tool_call"), ("Naive RAG", "naive_rag")):
        for seed in [] if args.skip_baselines else args.seeds:
            if not done(label, seed):
                rows.setdefault(label, []).append({"seed": seed, **dev_eval(args, kind, seed,
                                                                            kind=kind)})
                save()
    ckpt = warm_start_checkpoint(args)
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

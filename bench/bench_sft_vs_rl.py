"""RL against the best supervised policy, on any config: a warm-start sweep on dev, the best
one trained per seed, then three arms from it on test, paired by seed.

    .venv/bin/python -m bench.bench_sft_vs_rl --config configs/world.yaml --stage sweep
    .venv/bin/python -m bench.bench_sft_vs_rl --config configs/world.yaml --stage arms --seeds 0 1 2
    .venv/bin/python -m bench.bench_sft_vs_rl --config configs/world.yaml --stage summarize

Stages (each adds to OUT, default bench/results/sft_vs_rl/<config stem>, and skips what is
already there, so a stage can be stopped and run again):

- **sweep** (dev only). For each `--demos` count D, warm starts of E = 1, 2, 4, ... epochs
  (`sft.num_demos` D, `sft.epochs` E: D × E / `sft.batch_episodes` optimizer steps) from the
  config's base model, each evaluated on the first `--dev-tasks` tasks of `env.eval_split`
  at sampling seed 0, until the metric stops rising (`--patience` E in a row score no
  higher than the best E so far; where they tie, `--tiebreak`, a finer metric such as the
  world's progress, decides) or `--max-epochs`. Under a constant lr without warmup each E
  after the first trains on from the previous E's checkpoint (`sft.resume_from`: the same
  weights one run of E epochs gives, without training the first E/2 epochs again). Every
  evaluation is kept (OUT/sweep.json, and OUT/evals/sweep-dD-eE.jsonl, one line per
  episode). The best cell on dev (ties: fewer optimizer steps) is **best SFT**:
  OUT/best.json. `--reevaluate dD-eE ...` evaluates cells again from their checkpoints first
  (after a fix to the env's metrics or the evaluation), replacing their evaluation and
  keeping their training.
- **arms** (test), per `--seeds` seed s, each evaluated on the first `--test-tasks` tasks of
  `--split` (test) at sampling seed s:
  - `best_sft`: best SFT's D and E trained again on its own demonstration sample and order
    (`sft.demo_seed` s, `learner.seed` s), so the intervals carry the warm start's variance;
  - `rl_step`: `agent-r1-async launch` from it for `--budget-s` seconds of RL
    (`launch.max_wall_time_s`; GRPO with the config's step-level credit and process rewards),
    or for `--budget-updates` updates (`learner.total_updates`; `--budget-s` then only caps
    it): the same RL on any machine, where updates are long (a first update that outlasts a
    wall-clock budget leaves the final checkpoint waiting behind it);
  - `sft_continued`: best SFT trained on for the RL arm's wall time (its RL clock, from its
    processes being up to its final checkpoint: `rl_wall_s`) on fresh demonstrations
    (`sft.demo_offset` D: tasks no best-SFT warm start of that seed saw, or transcripts for
    `sft.demos_source: jsonl`) at the warm start's rate, passing over them again where fewer
    remain than that time uses: the equal-compute control;
  - `rl_token`: as `rl_step` with `algorithm.credit=token`;
  - `rl_filter`: as `rl_step` with `algorithm.filter_groups=true` (groups whose advantages
    are all zero are dropped at the buffer and replaced, not trained).
  A seed's arms run at one precision: the first command of a seed records `learner.bf16` and
  `engine.dtype` as this machine resolves them (arms.json, "precision") and every command of
  that seed passes them, so a seed resumed in another session, whose `auto` verdict may
  differ (bf16/probe.py measures it per machine), trains and evaluates as it began. A seed
  whose best SFT checkpoint is gone (run directories do not outlive a session) trains it
  again first, at that precision, where arms still start from it; the gone one's record stays
  as `best_sft_lost` (then `best_sft_lost2`, ...), and each arm records the checkpoint it
  started from (`start`). Each SFT records its weights' digest (`weights`, from the
  checkpoint's manifest); a best SFT trained again to the same digest keeps the gone one's
  evaluation instead of running it again.
- **summarize**: OUT/table.md (each arm per seed, mean ± sd; paired 95 % t intervals for
  rl_step − best_sft, rl_step − sft_continued, rl_step − rl_token, rl_filter − rl_step and
  sft_continued − best_sft, by seed and, within each seed, by task), and, where episodes
  report `optimal_len` (the world, TextWorldExpress), success against the optimal plan's
  length (buckets `--horizon-bins`, each the lengths above the previous bound up to its own)
  for best SFT, SFT continued and the RL arms: OUT/horizon.json and the curve,
  `--figure` (default OUT/success_vs_horizon.png; README's figures live in docs/).

Disk: every checkpoint holds the weights and the optimizer's state (2.2 GB for
SmolLM2-135M). Once nothing will read one again, the bench removes its run's `checkpoints/`
(the run's logs and metrics stay): a sweep cell another cell trained on from, an RL arm's or
SFT continued's after its evaluation. It keeps each sweep series' last cell (a longer
`--max-epochs` trains on from it) and each seed's best SFT (the start of arms asked for
later). `--keep-checkpoints` keeps them all.

`--metric` (default `success`; multi-hop QA: `em`) is the env metric every decision and row
uses; `--set k=v` overrides apply to every command, `--eval-set k=v` to the evaluations
only (e.g. `--eval-set engine.cpu_reserved_cores=0 --eval-set engine.ipc_busy_wait_s=0`: an
evaluation runs alone, so vLLM's worker may take every core). The world's knobs are the
config's: the bench never changes the task.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

from agent_r1_async.config import load_config
from agent_r1_async.learner.checkpoint_files import MANIFEST
from agent_r1_async.run.output.report import read_metrics
from bench.cli_runs import ROOT, cli, run_logged, sets
from bench.stats import (
    load_line,
    machine_kind,
    machine_line,
    mean_ci,
    mean_sd,
    paired_diffs,
    utc_date,
)

RL_ARMS = {"rl_step": [], "rl_token": ["algorithm.credit=token"],
           "rl_filter": ["algorithm.filter_groups=true"]}
"""The RL arms: each a launch from best SFT with these overrides."""
ARMS = ("best_sft", "rl_step", "sft_continued", "rl_token", "rl_filter")
DEFAULT_ARMS = ARMS[:4]
"""The arms a run takes unless `--arms` names others (`rl_filter` is asked for by name)."""
CONTINUED_EPOCHS = 8
"""`sft.epochs` of `sft_continued`, whose time limit (the RL arm's time) ends it: passes beyond
the first run only where the train split holds fewer fresh demonstrations than that time uses."""
PRECISION = "precision"
"""arms.json's key, per seed, for the precision its arms run at (not an arm)."""
HORIZON_ARMS = ("best_sft", "sft_continued", *RL_ARMS)
"""The arms the success-against-horizon curve shows: the warm start, its equal-compute
control and every RL arm."""
COMPARISONS = (("rl_step", "best_sft"), ("rl_step", "sft_continued"), ("rl_step", "rl_token"),
               ("rl_filter", "rl_step"), ("sft_continued", "best_sft"))


# --- one command each ---------------------------------------------------------------------


def sft(args: argparse.Namespace, name: str, overrides: list[str]) -> tuple[str, dict[str, Any]]:
    """`agent-r1-async sft` with `overrides` (no evaluation); (checkpoint, its training stats)."""
    stdout = run_logged(cli("sft", "--config", str(args.config), *sets([
        *args.overrides, *overrides, "sft.eval_before=false", "sft.eval_after=false",
        f"launch.run_root={args.out / 'runs'}", f"launch.name={name}",
    ])), args.out / "logs" / f"{name}.log")
    line = next(x for x in stdout.splitlines() if "; checkpoint " in x)
    steps, seconds = line.split("[sft] ")[1].split(" steps in ")
    loaded = next(x for x in stdout.splitlines() if " demonstrations from " in x)
    ckpt = line.split("; checkpoint ")[1].strip()
    return ckpt, {"sft_steps": int(steps), "sft_s": float(seconds.split(" s")[0]),
                  "sft_demos": int(loaded.split("[sft] ")[1].split()[0]),
                  **({"weights": w} if (w := weights_digest(ckpt)) else {})}


def weights_digest(ckpt: str) -> str | None:
    """SHA-256 over the names and SHA-256s of a checkpoint's model weights (the top-level
    `*.safetensors` its manifest lists), or None without a manifest: two checkpoints with the
    same digest hold the same weights byte for byte."""
    try:
        files = json.loads((Path(ckpt) / MANIFEST).read_text())["files"]
        lines = sorted(f"{name} {f['sha256']}" for name, f in files.items()
                       if name.endswith(".safetensors") and "/" not in name)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return hashlib.sha256("\n".join(lines).encode()).hexdigest() if lines else None


def evaluate(args: argparse.Namespace, name: str, model: str, split: str, tasks: int,
             seed: int) -> dict[str, Any]:
    """`agent-r1-async eval` of `model`: its summary metric and every episode's row."""
    rows_path = args.out / "evals" / f"{name}.jsonl"
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    run_logged(cli("eval", "--config", str(args.config), "--model", model, "--split", split,
                   "--num-tasks", str(tasks), "--episodes-out", str(rows_path),
                   *sets([*args.overrides, *args.eval_overrides, f"launch.seed={seed}"])),
               args.out / "logs" / f"eval-{name}.log")
    rows = read_rows(rows_path)
    return {"metric": metric_of(rows, args.metric),
            **({"tiebreak": metric_of(rows, args.tiebreak), "tiebreak_name": args.tiebreak}
               if args.tiebreak else {}),
            "episodes": len(rows), "split": split,
            "mean_steps": statistics.fmean(r["steps"] for r in rows), "rows": _in_repo(rows_path)}


def _in_repo(path: Path) -> str:
    """`path` relative to the repository where it lies inside it (committed results name
    their files so that any checkout reads them), else as given."""
    p = path.resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """An evaluation's episode rows (JSON lines), `path` absolute or in the repository."""
    return [json.loads(x) for x in (ROOT / path).read_text().splitlines()]


def metric_of(rows: list[dict[str, Any]], name: str) -> float:
    """The mean of metric `name` over episodes, a failed episode (no metric) counting 0."""
    return sum(float(r["metrics"].get(name, 0.0)) for r in rows) / len(rows)


def rl(args: argparse.Namespace, name: str, seed: int, ckpt: str,
       extra: list[str]) -> tuple[str, dict[str, Any]]:
    """One launch from `ckpt` for `--budget-s` of RL, or `--budget-updates` updates within it;
    (final checkpoint, its run stats)."""
    from agent_r1_async.learner.checkpoint import latest_checkpoint

    stdout = run_logged(cli("launch", "--config", str(args.config), *sets([
        *args.overrides, f"model.init_from={ckpt}", "launch.warm_start=false",
        f"launch.name={name}", f"launch.seed={seed}", f"actors.seed={seed}",
        f"buffer.seed={seed}", f"learner.seed={seed}",
        f"launch.max_wall_time_s={args.budget_s}",
        f"learner.total_updates={args.budget_updates or 100000}",
        "eval.in_launch=false", f"launch.run_root={args.out / 'runs'}", *extra,
    ])), args.out / "logs" / f"{name}.log")
    run_dir = Path(stdout.split("[launch] run directory: ")[-1].splitlines()[0].strip())
    final = latest_checkpoint(str(run_dir))
    if final is None:
        raise SystemExit(f"{run_dir}: no checkpoint to evaluate")
    updates = [r for r in read_metrics(run_dir) if "learner/loss" in r]
    return str(final), {"run": str(run_dir), "updates": len(updates),
                        "rl_s": rl_wall_s(run_dir, Path(final), updates),
                        "steps_p50": statistics.median(
                            r.get("episodes/steps_p50", math.nan) for r in updates)
                        if updates else math.nan}


def rl_wall_s(run_dir: Path, final: Path, updates: list[dict[str, Any]]) -> float:
    """RL's wall time up to the checkpoint evaluated: from the launch's processes being up
    (startup.json) to `final`'s manifest, written last. It counts the first batch's wait and
    an update a stop let finish, so an arm of few long updates gets the time it used, not the
    span between its first and last logged update; without those files, that span."""
    path, manifest = run_dir / "startup.json", final / MANIFEST
    phases = dict(json.loads(path.read_text()).get("phases", [])) if path.exists() else {}
    if "processes" in phases and manifest.exists():
        return manifest.stat().st_mtime - float(phases["processes"])
    times = [float(r["time"]) for r in updates]
    return max(times) - min(times) if times else 0.0


def lost_key(runs: dict[str, Any]) -> str:
    """The record name for a seed's best SFT whose checkpoint is gone: `best_sft_lost`, then
    `best_sft_lost2`, ... so an arm that started from an earlier one keeps its start's score."""
    n = 1 + sum(1 for k in runs if k.startswith("best_sft_lost"))
    return "best_sft_lost" if n == 1 else f"best_sft_lost{n}"


def keep_rows(record: dict[str, Any], name: str) -> dict[str, Any]:
    """`record` with its evaluation's rows moved to evals/NAME.jsonl beside them, so that the
    arm's next evaluation, which writes to the arm's own file, leaves them."""
    rows = record.get("rows")
    if not rows or not (ROOT / rows).is_file():
        return record
    moved = (ROOT / rows).with_name(f"{name}.jsonl")
    (ROOT / rows).replace(moved)
    return {**record, "rows": _in_repo(moved)}


def restart_arms(runs: dict[str, Any], arms: list[str], seed: int) -> list[str]:
    """Move each of `arms` recorded as started from a best SFT since replaced (the checkpoint
    of a `best_sft_lostN` record) to `ARM_from_lostN`, its rows to evals/ARM_from_lostN-sS.jsonl,
    so that it runs again from the seed's best SFT and every arm a seed pairs shares one start;
    the arms moved."""
    current = runs.get("best_sft", {}).get("checkpoint")
    lost = {r["checkpoint"]: k for k, r in runs.items()
            if k.startswith("best_sft_lost") and isinstance(r, dict) and r.get("checkpoint")}
    moved = []
    for arm in arms:
        start = runs.get(arm, {}).get("start")
        if arm == "best_sft" or start is None or start == current or start not in lost:
            continue
        key = f"{arm}_from_{lost[start].removeprefix('best_sft_')}"
        runs[key] = keep_rows(runs.pop(arm), f"{key}-s{seed}")
        moved.append(arm)
    return moved


def drop_checkpoints(args: argparse.Namespace, ckpt: str) -> bool:
    """Remove the run's `checkpoints/` directory that holds checkpoint `ckpt` unless
    `--keep-checkpoints`; whether it did. Nothing outside a directory of that name goes."""
    where = Path(ckpt).parent
    if getattr(args, "keep_checkpoints", False) or where.name != "checkpoints" \
            or not where.is_dir():
        return False
    shutil.rmtree(where)
    return True


def seed_precision(cfg: Any) -> dict[str, Any]:
    """`learner.bf16` and `engine.dtype` as `cfg` resolves them on this machine (`auto`: the
    cached bf16 verdict, agent_r1_async/precision.py)."""
    from agent_r1_async import precision

    model = cfg.model.name_or_path
    return {"learner_bf16": precision.learner_bf16(cfg.learner, model=model),
            "engine_dtype": precision.engine_dtype(cfg.engine, model=model)}


def pinned(args: argparse.Namespace, pin: dict[str, Any]) -> argparse.Namespace:
    """`args` whose commands run at the seed's recorded precision, whatever `auto` would
    resolve to now: a seed resumed in another session (whose bf16 verdict may differ) trains
    and evaluates its arms as its first arm did."""
    return argparse.Namespace(**{**vars(args), "overrides": [
        *args.overrides, f"learner.bf16={str(pin['learner_bf16']).lower()}",
        f"engine.dtype={pin['engine_dtype']}"]})


# --- stages -------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def resumable(cfg: Any, cell: dict[str, Any]) -> bool:
    """Whether a sweep cell's checkpoint can be trained on to more epochs exactly
    (`sft.resume_from`: a constant lr without warmup, its checkpoint still on disk)."""
    return (cfg.sft.schedule == "constant" and cfg.sft.warmup_steps == 0
            and Path(cell.get("checkpoint", "")).is_dir())


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_config(args.config, args.overrides)
    per_step = cfg.sft.batch_episodes
    path = args.out / "sweep.json"
    cells = _load(path)
    for key in args.reevaluate:
        reevaluate(args, cfg, cells, key)
        _save(path, cells)

    for demos in args.demos:
        best = (-math.inf, -math.inf)
        misses = 0  # cells in a row that scored no higher than `best`
        epochs = 1
        while epochs <= args.max_epochs:
            key = f"d{demos}-e{epochs}"
            if key not in cells:
                prev = cells.get(f"d{demos}-e{epochs // 2}") if epochs > 1 else None
                resume = prev is not None and resumable(cfg, prev)
                ckpt, stats = sft(args, f"sweep-{key}", [
                    f"sft.num_demos={demos}", f"sft.epochs={epochs}",
                    *([f"sft.resume_from={prev['checkpoint']}"] if resume else [])])
                if resume:  # this cell's training went on from the previous one's
                    stats["resumed_from"] = f"d{demos}-e{epochs // 2}"
                    stats["sft_s_total"] = stats["sft_s"] + prev.get("sft_s_total", prev["sft_s"])
                res = evaluate(args, f"sweep-{key}", ckpt, cfg.env.eval_split, args.dev_tasks, 0)
                cells[key] = {"demos": demos, "epochs": epochs, "checkpoint": ckpt,
                              "steps": epochs * -(-demos // per_step), **stats, **res,
                              "date": utc_date(),
                              "load": load_line(), "machine": machine_line()}
                if resume and drop_checkpoints(args, prev["checkpoint"]):
                    prev["checkpoint_removed"] = utc_date()  # `key` trained on from it
                _save(path, cells)
                print(f"  {key}: dev {args.metric} {cells[key]['metric']:.3f}"
                      + (f", {args.tiebreak} {cells[key]['tiebreak']:.3f}" if args.tiebreak else ""),
                      flush=True)
            if score(cells[key]) <= best:
                misses += 1
                if misses >= args.patience:
                    break
            else:
                best, misses = score(cells[key]), 0
            epochs *= 2
    best_cell = best_of(cells)
    _save(args.out / "best.json", best_cell)
    print(f"best SFT on dev: {best_cell}")
    return cells


def score(cell: dict[str, Any]) -> tuple[float, float]:
    """A sweep cell's dev score: its metric, then its tie-break metric."""
    return cell["metric"], cell.get("tiebreak", 0.0)


def best_of(cells: dict[str, Any]) -> dict[str, Any]:
    """The best sweep cell on dev: the highest score, then the fewest optimizer steps."""
    top = max(cells.values(), key=lambda c: (*score(c), -c["steps"]))
    return {k: top[k] for k in ("demos", "epochs", "steps", "metric")}


def reevaluate(args: argparse.Namespace, cfg: Any, cells: dict[str, Any], key: str) -> None:
    """Evaluate sweep cell `key`'s checkpoint again, as the sweep did (the first `--dev-tasks`
    tasks of `env.eval_split`, sampling seed 0), replacing its evaluation; its training stays.
    For an evaluation the env or the harness got wrong: the cell keeps when it was trained
    (`trained`) and the metric it had (`metric_before`)."""
    cell = cells.get(key)
    if cell is None or not Path(cell.get("checkpoint", "")).is_dir():
        raise SystemExit(f"--reevaluate {key}: no sweep cell with its checkpoint on disk "
                         f"(cells: {', '.join(sorted(cells)) or 'none'})")
    res = evaluate(args, f"sweep-{key}", cell["checkpoint"], cfg.env.eval_split,
                   args.dev_tasks, 0)
    cell.update({"trained": cell.get("trained", cell["date"]),
                 "metric_before": cell.get("metric_before", cell["metric"]), **res,
                 "date": utc_date(),
                 "load": load_line()})
    print(f"  {key} evaluated again: dev {args.metric} {cell['metric']:.3f} (before "
          f"{cell['metric_before']:.3f})"
          + (f", {args.tiebreak} {cell['tiebreak']:.3f}" if args.tiebreak else ""), flush=True)


def arms(args: argparse.Namespace) -> dict[str, Any]:
    best = _load(args.out / "best.json")
    if not best:
        raise SystemExit(f"{args.out / 'best.json'} missing: run --stage sweep first")
    cfg = load_config(args.config, args.overrides)
    path = args.out / "arms.json"
    done = _load(path)
    d, e = best["demos"], best["epochs"]
    for seed in args.seeds:
        runs = done.setdefault(str(seed), {})

        def restart(runs: dict[str, Any] = runs, seed: int = seed) -> None:
            if moved := restart_arms(runs, args.arms, seed):
                _save(path, done)
                print(f"  seed {seed}: {', '.join(moved)} started from a best SFT since "
                      "replaced: running again from the seed's best SFT", flush=True)

        restart()
        if all(a in runs for a in args.arms):
            continue
        pin = runs.setdefault(PRECISION, seed_precision(cfg))
        print(f"  seed {seed}: learner bf16 {pin['learner_bf16']}, engine {pin['engine_dtype']}",
              flush=True)
        seed_args = pinned(args, pin)

        def record(arm: str, result: dict[str, Any], runs: dict[str, Any] = runs,
                   seed: int = seed) -> None:
            runs[arm] = {**result, "seed": seed, "load": load_line(), "machine": machine_line(),
                         "date": utc_date()}
            _save(path, done)
            print(f"  seed {seed} {arm}: test {args.metric} {result['metric']:.3f}", flush=True)

        pending = [a for a in (*RL_ARMS, "sft_continued") if a in args.arms and a not in runs]
        lost = runs.get("best_sft", {}).get("checkpoint")
        lost_as = None
        if lost and pending and not Path(lost).exists():
            # the session that trained it ended and took its run directory (not committed):
            # train it again (same demonstration seed, order and learner seed; an oracle that
            # draws, as CoinCollector's, may give a game another path) and evaluate that one
            # unless its weights match, so the arms still to run start from a best SFT measured
            # here; the first is kept
            print(f"  seed {seed} best_sft: checkpoint {lost} is gone and {', '.join(pending)} "
                  "still start from it: training it again", flush=True)
            lost_as = lost_key(runs)
            runs[lost_as] = keep_rows(runs.pop("best_sft"), f"{lost_as}-s{seed}")
            _save(path, done)
        if "best_sft" not in runs and "best_sft" in args.arms:
            ckpt, stats = sft(seed_args, f"best-s{seed}", [
                f"sft.num_demos={d}", f"sft.epochs={e}", f"sft.demo_seed={seed}",
                f"learner.seed={seed}"])
            gone = runs.get(lost_as or "", {})
            if stats.get("weights") and stats["weights"] == gone.get("weights"):
                # the same weights byte for byte: the gone checkpoint's evaluation (its rows
                # back under the arm's own name) stands
                kept = keep_rows(runs.pop(lost_as or ""), f"best_sft-s{seed}")
                runs["best_sft"] = {**kept, "checkpoint": ckpt,
                                    "trained_again": {**stats, "date": utc_date(),
                                                      "load": load_line()}}
                _save(path, done)
                print(f"  seed {seed} best_sft: trained again to the same weights; its test "
                      f"{args.metric} {runs['best_sft']['metric']:.3f} stands", flush=True)
            else:
                res = evaluate(seed_args, f"best_sft-s{seed}", ckpt, args.split,
                               args.test_tasks, seed)
                record("best_sft", {"checkpoint": ckpt, **stats, **res})
        start = runs.get("best_sft", {}).get("checkpoint")
        restart()  # arms done from the best SFT just trained again in its place
        for arm, extra in RL_ARMS.items():
            if arm in runs or arm not in args.arms or start is None:
                continue
            final, stats = rl(seed_args, f"{arm}-s{seed}", seed, start, extra)
            res = evaluate(seed_args, f"{arm}-s{seed}", final, args.split, args.test_tasks, seed)
            drop_checkpoints(args, final)
            record(arm, {"checkpoint": final, "start": start, **stats, **res})
        rl_s = runs.get("rl_step", {}).get("rl_s")
        if "sft_continued" not in runs and "sft_continued" in args.arms and rl_s and start:
            # as many fresh demonstrations as the RL arm's time could use at the warm start's
            # pace (1.5x over); the time limit binds, so a second pass over them happens only
            # where the train split holds fewer fresh ones than that
            per_step_s = runs["best_sft"]["sft_s"] / max(runs["best_sft"]["sft_steps"], 1)
            demos = min(args.max_fresh_demos,
                        cfg.sft.batch_episodes * math.ceil(1.5 * rl_s / per_step_s))
            ckpt, stats = sft(seed_args, f"sft_continued-s{seed}", [
                f"model.init_from={start}", f"sft.num_demos={demos}",
                f"sft.epochs={CONTINUED_EPOCHS}",
                f"sft.demo_seed={seed}", f"sft.demo_offset={d}", f"learner.seed={seed}",
                f"sft.max_wall_time_s={rl_s:.0f}"])
            res = evaluate(seed_args, f"sft_continued-s{seed}", ckpt, args.split, args.test_tasks,
                           seed)
            drop_checkpoints(args, ckpt)
            record("sft_continued", {"checkpoint": ckpt, "start": start, "fresh_demos": demos,
                                     **stats, **res})
    return done


# --- summary ------------------------------------------------------------------------------


def horizon(rows_path: str, bins: list[int], name: str) -> list[dict[str, float]]:
    """Success by the optimal plan's length: one row per bucket (optimal_len ≤ bin) with the
    episodes in it and their mean `name`."""
    rows = read_rows(rows_path)
    out, lo = [], 0
    for b in bins:
        inside = [r for r in rows if lo < r["metrics"].get("optimal_len", -1) <= b]
        if inside:
            out.append({"le": b, "episodes": len(inside), "metric": metric_of(inside, name)})
        lo = b
    return out


def paired_by_task(rows_a: str, rows_b: str,
                   name: str) -> tuple[int, float, float, float] | None:
    """`name` of arm a minus arm b over the tasks both evaluated (a task's episodes averaged, a
    failed episode counting 0): (tasks, mean, 95 % t lo, hi); None under two tasks in common
    or rows without `task_id`."""
    per_arm = []
    for path in (rows_a, rows_b):
        rows = read_rows(path)
        if any("task_id" not in r for r in rows):
            return None
        by_task: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_task.setdefault(r["task_id"], []).append(r)
        per_arm.append({t: metric_of(episodes, name) for t, episodes in by_task.items()})
    a, b = per_arm
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return None
    m, half = mean_ci([a[t] - b[t] for t in common])
    return len(common), m, m - half, m + half


def spread(values: list[float]) -> str:
    """`mean ± sd` over seeds, or the one value and "(one seed)"."""
    if len(values) < 2:
        return f"{values[0]:.3f} (one seed)"
    m, sd = mean_sd(values)
    return f"{m:.3f} ± {sd:.3f}"


def paired_line(label: str, seeds: list[int], diffs: list[float]) -> str:
    """`- LABEL, paired by seed (d0, d1, ...): mean, 95 % t [lo, hi]` (one seed: no interval)."""
    p = paired_diffs(seeds, diffs)
    shown = ", ".join(f"{x:+.3f}" for x in p["diffs"])
    ci = (f"mean {p['mean']:+.3f}, 95 % t [{p['lo']:+.3f}, {p['hi']:+.3f}]"
          if len(seeds) > 1 else f"{p['mean']:+.3f} (one seed: no interval)")
    return f"- {label}, paired by seed ({shown}): {ci}"


def summarize(args: argparse.Namespace) -> str:
    done = _load(args.out / "arms.json")
    cells = _load(args.out / "sweep.json")
    best = _load(args.out / "best.json")
    lines = [f"# {args.config.stem}: best SFT vs RL ({args.metric})", ""]
    if cells:
        tie = next((c["tiebreak_name"] for c in cells.values() if "tiebreak_name" in c),
                   args.tiebreak)
        lines += ["## Warm-start sweep (dev)", "",
                  f"| demos | epochs | steps | dev {args.metric} |"
                  + (f" dev {tie} (tie-break) |" if tie else "")
                  + " episodes | SFT s | machine |",
                  "|---|---|---|---|" + ("---|" if tie else "") + "---|---|---|"]
        for c in sorted(cells.values(), key=lambda c: (c["demos"], c["epochs"])):
            lines.append(f"| {c['demos']} | {c['epochs']} | {c['steps']} | {c['metric']:.3f} | "
                         + (f"{c['tiebreak']:.3f} | " if tie and "tiebreak" in c else
                            "– | " if tie else "")
                         + f"{c['episodes']} | {c['sft_s']:.0f} | "
                         f"{machine_kind(c.get('machine', ''))} |")
        so_far = best_of(cells)
        label = "Best SFT" if so_far == best else "Best so far (the sweep has not finished)"
        lines += ["", f"{label}: {so_far}", ""]
    per_arm = {a: [(int(s), r[a]) for s, r in sorted(done.items()) if a in r] for a in ARMS}
    if any(per_arm.values()):
        lines += [f"## Arms ({args.split})", "",
                  f"| arm | {args.metric} per seed | mean ± sd | updates / SFT steps |",
                  "|---|---|---|---|"]
        for arm, runs in per_arm.items():
            if not runs:
                continue
            vals = [r["metric"] for _, r in runs]
            work = ", ".join(str(r.get("updates", r.get("sft_steps", ""))) for _, r in runs)
            lines.append(f"| {arm} | " + ", ".join(f"s{s} {r['metric']:.3f}" for s, r in runs)
                         + f" | {spread(vals)} | {work} |")
        lines.append("")
        for a, b in COMPARISONS:
            by_seed = dict(per_arm[b])
            pairs = [(s, r["metric"] - by_seed[s]["metric"]) for s, r in per_arm[a]
                     if s in by_seed]
            if pairs:
                lines.append(paired_line(f"{a} − {b}", [s for s, _ in pairs],
                                         [x for _, x in pairs]))
            for s, r in per_arm[a]:
                by_task = paired_by_task(r["rows"], by_seed[s]["rows"], args.metric) \
                    if s in by_seed else None
                if by_task:
                    n, m, lo, hi = by_task
                    lines.append(f"  - seed {s}, paired by task ({n} tasks): {m:+.3f}, "
                                 f"95 % t [{lo:+.3f}, {hi:+.3f}]")
    curves = {arm: [horizon(r["rows"], args.horizon_bins, args.metric) for _, r in runs]
              for arm, runs in per_arm.items() if arm in HORIZON_ARMS and runs}
    if any(c and c[0] for c in curves.values()):
        _save(args.out / "horizon.json", curves)
        figure = args.figure or args.out / "success_vs_horizon.png"
        plot_horizon(curves, figure, args.metric)
        lines += ["", f"Success against the optimal plan's length: {figure}, horizon.json"]
    text = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(text)
    print(text)
    return text


def plot_horizon(curves: dict[str, list[list[dict[str, float]]]], path: Path,
                 metric: str) -> None:
    """Per arm, the metric per optimal-length bucket, pooled over seeds (episode-weighted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    bounds: set[int] = set()
    for i, (arm, per_seed) in enumerate(curves.items()):
        pooled: dict[int, list[float]] = {}
        for seed_rows in per_seed:
            for b in seed_rows:
                n, s = pooled.setdefault(int(b["le"]), [0.0, 0.0])
                pooled[int(b["le"])] = [n + b["episodes"], s + b["episodes"] * b["metric"]]
        xs = sorted(pooled)
        bounds.update(xs)
        ax.plot(xs, [pooled[x][1] / pooled[x][0] for x in xs], "o-", color=f"C{i}", label=arm)
    ax.set(xscale="log", xlabel="optimal plan length (bucket upper bound, steps)",
           ylabel=metric, ylim=(-0.02, 1.02), title="Success against horizon (test)")
    ax.minorticks_off()
    ax.set_xticks(sorted(bounds), [str(b) for b in sorted(bounds)])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command line; another bench that runs a stage builds its arguments from it, so
    they carry every option's default."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    ap.add_argument("--eval-set", dest="eval_overrides", action="append", default=[],
                    metavar="K=V", help="an override for the evaluations only")
    ap.add_argument("--stage", choices=("sweep", "arms", "summarize"), required=True)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--metric", default="success")
    ap.add_argument("--tiebreak", default=None,
                    help="a finer env metric that decides the sweep where --metric ties "
                         "(the world: progress, when success is 0 everywhere)")
    ap.add_argument("--demos", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--patience", type=int, default=1,
                    help="sweep: stop a demonstration count after this many epoch doublings "
                         "in a row that score no higher than its best (2 where one noisy "
                         "evaluation should not end it)")
    ap.add_argument("--reevaluate", nargs="+", default=[], metavar="dD-eE",
                    help="sweep: evaluate these cells' checkpoints again first (their "
                         "training kept), then go on with the sweep")
    ap.add_argument("--dev-tasks", type=int, default=50)
    ap.add_argument("--split", default="test")
    ap.add_argument("--test-tasks", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=ARMS)
    ap.add_argument("--budget-s", type=float, default=1800.0)
    ap.add_argument("--budget-updates", type=int, default=0,
                    help="RL arms stop after this many updates (0: at --budget-s only)")
    ap.add_argument("--max-fresh-demos", type=int, default=2048)
    ap.add_argument("--horizon-bins", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    ap.add_argument("--figure", type=Path, default=None,
                    help="where summarize draws the horizon curve (default: "
                         "OUT/success_vs_horizon.png)")
    ap.add_argument("--keep-checkpoints", action="store_true",
                    help="keep every run's checkpoints (by default those nothing reads again "
                         "are removed)")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    if args.patience < 1:
        ap.error("--patience: expected 1 or more")
    args.config = args.config.resolve()
    args.out = (args.out or ROOT / "bench/results/sft_vs_rl" / args.config.stem).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {utc_date()}; {load_line()}; out {args.out}")
    {"sweep": sweep, "arms": arms, "summarize": summarize}[args.stage](args)
    if args.stage != "summarize":
        summarize(args)


if __name__ == "__main__":
    main()

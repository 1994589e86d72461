"""`agent-r1-async` command line.

Argument parsing uses only the standard library; torch, transformers, vLLM and Ray are
imported inside each command after parsing, so `agent-r1-async --help` stays fast.

    agent-r1-async launch [--config configs/default.yaml] [--set key=value ...] [--verbose] [--force]
    agent-r1-async launch --resume RUN_DIR [--fresh] [--set key=value ...]
    agent-r1-async eval --split dev --num-tasks 64 [--model PATH] [--baseline naive_rag]
    agent-r1-async sft --config configs/sft.yaml
    agent-r1-async report RUN_DIR
    agent-r1-async episodes RUN_DIR [--update N] [--worst|--failed] [--id ID] [--list]
    agent-r1-async prepare-model smollm2-135m-instruct
    agent-r1-async envs list
    agent-r1-async envs check [NAME] [--split dev] [--episodes N]   (exit 1: a check failed)
    agent-r1-async config show [--config ...] [--set ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "default.yaml"


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        help=f"YAML run config (default: {DEFAULT_CONFIG.relative_to(REPO_ROOT)} when present)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set buffer.max_staleness=0 (repeatable)",
    )


def _load(args: argparse.Namespace):  # -> RunConfig
    from agent_r1_async.config import load_config

    path = args.config
    if path is None and DEFAULT_CONFIG.is_file():
        path = str(DEFAULT_CONFIG)
    return load_config(path, args.overrides)


def cmd_launch(args: argparse.Namespace) -> int:
    from agent_r1_async.config import ConfigError, load_config
    from agent_r1_async.run.launch import launch

    if args.fresh and not args.resume:
        raise ConfigError("--fresh: only with --resume RUN_DIR (a launch without --resume "
                          "always starts from scratch in a new run directory)")
    if args.resume:  # the run's own config, plus any --set (e.g. more learner.total_updates)
        cfg = load_config(Path(args.resume) / "config.yaml", args.overrides)
    else:
        cfg = _load(args)
    if args.verbose:
        import msgspec

        cfg = msgspec.structs.replace(
            cfg, logging=msgspec.structs.replace(cfg.logging, verbose=True))
    return launch(cfg, address=args.address, resume=args.resume, force=args.force,
                  fresh=args.fresh)


def cmd_eval(args: argparse.Namespace) -> int:
    from agent_r1_async.run.evaluate import evaluate, format_table
    from agent_r1_async.run.preflight.checks import env_preflight

    if args.with_text and not args.episodes_out:
        print("agent-r1-async: --with-text adds a field to --episodes-out rows: give "
              "--episodes-out FILE too", file=sys.stderr)
        return 2
    cfg = _load(args)
    split = args.split or cfg.env.eval_split
    env_preflight(cfg, "eval", split)
    num_tasks = args.num_tasks or cfg.eval.num_tasks
    errors: list[str] = []
    rows: list[dict] = []
    result = evaluate(cfg, split=split, num_tasks=num_tasks, model_path=args.model,
                      baseline=args.baseline, rag_k=args.rag_k, errors=errors, episodes=rows,
                      with_text=args.with_text)
    print(format_table([{"model": args.baseline or "policy", **result}]))
    if args.episodes_out:
        import json

        with open(args.episodes_out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    if result["failed_rate"] >= 1.0:  # nothing was measured: a script must not take it for 0
        n = int(result["episodes"])
        print(f"agent-r1-async: every episode failed ({n} of {n}); first: "
              f"{errors[0] if errors else '(no reason recorded)'}", file=sys.stderr)
        return 1
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from agent_r1_async.run.preflight.checks import env_preflight
    from agent_r1_async.run.sft import run_sft

    cfg = _load(args)
    env_preflight(cfg, "sft")
    return run_sft(cfg)


def cmd_report(args: argparse.Namespace) -> int:
    from agent_r1_async.run.output.report import write_report

    for path in write_report(args.run_dir):
        print(path)
    return 0


def cmd_episodes(args: argparse.Namespace) -> int:
    from agent_r1_async.run.output.episode_view import show

    return show(args.run_dir, args.update, args.worst, args.failed, args.id or "", args.list,
                args.color)


def cmd_prepare_model(args: argparse.Namespace) -> int:
    from agent_r1_async.models import KNOWN_MODELS, TINY_MODEL_ALIAS, prepare_model

    if args.list or not args.alias:
        for m in KNOWN_MODELS.values():
            print(f"{m.alias:28s} {m.description}")
        print(f"{TINY_MODEL_ALIAS:28s} tiny random-init Llama with the SmolLM2 tokenizer (tests)")
        return 0
    print(prepare_model(args.alias))
    return 0


def cmd_envs_list(args: argparse.Namespace) -> int:
    from agent_r1_async.envs.registry import import_env_modules, list_envs

    import_env_modules(_load(args).env)  # names registered by `env.import` modules too
    for name, description in list_envs():
        print(f"{name:20s} {description}")
    return 0


def cmd_envs_check(args: argparse.Namespace) -> int:
    from agent_r1_async.run.preflight.checks import episodes_in_flight
    from agent_r1_async.run.preflight.env_check import check_env, named_env
    from agent_r1_async.run.preflight.prompt_budget import prompt_budget

    cfg = _load(args)
    env_cfg = named_env(cfg.env, args.name) if args.name else cfg.env
    splits = args.split or [env_cfg.train_split, env_cfg.eval_split]
    budget, note = prompt_budget(cfg)  # the policy's tokenizer: prompts must fit max_model_len
    ok, lines = check_env(env_cfg, list(dict.fromkeys(splits)), args.episodes, budget, note,
                          episodes_in_flight(cfg))
    if env_cfg.max_turns != cfg.env.max_turns:
        lines.insert(1, f"  turns   env.max_turns {env_cfg.max_turns} (the env's suggestion; "
                        f"the config's {cfg.env.max_turns} is for {cfg.env.name})")
    print("\n".join(lines))
    return 0 if ok else 1


def cmd_config_show(args: argparse.Namespace) -> int:
    from agent_r1_async.config import dump_config
    from agent_r1_async.run.preflight.env_check import check_args

    cfg = _load(args)
    check_args(cfg.env)  # env.args is checked against the env's own Args struct
    print(dump_config(cfg), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-r1-async",
        description="Asynchronous off-policy RL for multi-step tool-using LLM agents.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("launch", help="run actors, buffer and learner (local Ray or a cluster)")
    _add_config_args(p)
    p.add_argument("--address", default=None, help="Ray address: 'auto' or host:port (default: local)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue a run from its latest checkpoint (refused when RUN_DIR has "
                        "none: see --fresh)")
    p.add_argument("--fresh", action="store_true",
                   help="with --resume: RUN_DIR has no checkpoint yet (its launch stopped "
                        "before the first one); train it from update 0 in that directory")
    p.add_argument("--verbose", action="store_true",
                   help="every process's own output on the console too (logging.verbose); "
                        "otherwise it is in RUN_DIR/logs/")
    p.add_argument("--force", action="store_true",
                   help="launch even when the memory check says the run does not fit, or "
                        "(joining a cluster) no node up now has a role's resources")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("eval", help="evaluate a model on held-out tasks (exits 1 when every "
                                    "episode failed)")
    _add_config_args(p)
    p.add_argument("--split", default=None, help="dataset split (default: env.eval_split)")
    p.add_argument("--num-tasks", type=int, default=0, help="tasks to evaluate (default: eval.num_tasks)")
    p.add_argument("--model", default=None, help="model dir or alias (default: model.name_or_path)")
    p.add_argument("--baseline", default="", choices=["base_tool_call", "naive_rag"],
                   help="base_tool_call: the untrained model.name_or_path with the tool prompt; "
                        "naive_rag: top-k BM25 passages for the question in the prompt, one turn")
    p.add_argument("--rag-k", type=int, default=0,
                   help="passages naive_rag puts in the prompt (default: env.args.top_k)")
    p.add_argument("--episodes-out", default="", metavar="FILE",
                   help="also write one JSON line per episode: task, status, outcome, return, "
                        "steps, the env's metrics")
    p.add_argument("--with-text", action="store_true",
                   help="--episodes-out rows also carry `text`: each episode's last context and "
                        "action, decoded (what the model read and wrote)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("sft", help="supervised warm start on demonstrations")
    _add_config_args(p)
    p.set_defaults(func=cmd_sft)

    p = sub.add_parser("report", help="write PNG plots of reward and staleness for a run")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("episodes", help="print a sampled episode of a run turn by turn "
                                        "(logging.episodes_every)")
    p.add_argument("run_dir")
    p.add_argument("--update", type=int, default=None, metavar="N",
                   help="the sample of update N (default: the newest)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--worst", action="store_true", help="the sample's lowest return")
    which.add_argument("--failed", action="store_true",
                       help="the newest failed episode (env or engine error, timeout)")
    which.add_argument("--id", default=None, metavar="ID", help="an episode id or its prefix")
    which.add_argument("--list", action="store_true", help="list the sample's episodes")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="auto: on a terminal that allows it (NO_COLOR unset)")
    p.set_defaults(func=cmd_episodes)

    p = sub.add_parser("prepare-model", help="convert a known model into a local HF directory")
    p.add_argument("alias", nargs="?", default=None)
    p.add_argument("--list", action="store_true", help="list known model aliases")
    p.set_defaults(func=cmd_prepare_model)

    p = sub.add_parser("envs", help="environments")
    envs_sub = p.add_subparsers(dest="envs_command", metavar="SUBCOMMAND", required=True)
    q = envs_sub.add_parser("list", help="list registered environments")
    _add_config_args(q)
    q.set_defaults(func=cmd_envs_list)
    q = envs_sub.add_parser("check", help="import, configure and build an env, play its oracle")
    q.add_argument("name", nargs="?", default=None, help="env name (default: env.name)")
    _add_config_args(q)
    q.add_argument("--split", action="append", default=[],
                   help="split to check (repeatable; default: env.train_split and env.eval_split)")
    q.add_argument("--episodes", type=int, default=1, help="oracle episodes per split (default 1)")
    q.set_defaults(func=cmd_envs_check)

    p = sub.add_parser("config", help="configs")
    cfg_sub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    q = cfg_sub.add_parser("show", help="print the resolved config")
    _add_config_args(q)
    q.set_defaults(func=cmd_config_show)
    return parser


def cwd_importable() -> None:
    """Every command imports modules from the working directory (an env next to the config),
    and so do the processes it starts: spawned children inherit `sys.path`, Ray workers and
    other subprocesses `PYTHONPATH`. (On a cluster, install the module on every node.)"""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cwd_importable()
    from agent_r1_async.config import ConfigError

    try:
        return int(args.func(args) or 0)
    except ConfigError as e:  # one line, whatever the message (a YAML error spans several)
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        print(f"agent-r1-async: config error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

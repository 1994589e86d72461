"""`agent-r1-async episodes RUN_DIR`: a sampled episode, turn by turn, in the terminal.

Reads `RUN_DIR/episodes/update-N.jsonl` (run/output/episodes.py) and prints one episode:
a header (update, ids, why it was sampled, status, outcome, return, the versions it spans),
then each step: its version(s) and staleness, the importance weight (mean, max), the process
reward and advantage, the engine's finish reason, the tail of the context it read (first
step), the action, its tool calls with their arguments, and what came back.

Which episode: `--id ID` (a prefix of its id), `--failed` (the newest failed one: status
env_error, engine_error or timeout), `--worst` (the lowest return of the sample), else the
sample's first one (the best episode of its first group). `--update N` reads that update's
sample (default: the newest; with `--failed` or `--id`, the newest that has one). `--list`
prints the sample's episodes, one line each.

Highlighted (in color on a terminal that allows it: a TTY, `NO_COLOR` unset, `TERM` not
dumb; `--color always|never` decides otherwise): tool calls, positive and negative rewards,
a version that changed since the previous step or within a step, importance weights outside
the band (`algorithm.is_mask_low` / `is_mask_high` when set, else [1 / c_max, c_max], read
from RUN_DIR/config.yaml), a failed status and its error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from agent_r1_async.run.output.episodes import sample_files

TRAINABLE = ("ok", "truncated")

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "magenta": "35", "cyan": "36"}


@dataclass(frozen=True)
class Style:
    color: bool

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"


def use_color(mode: str, stream: TextIO) -> bool:
    if mode != "auto":
        return mode == "always"
    return (stream.isatty() and "NO_COLOR" not in os.environ
            and os.environ.get("TERM", "") != "dumb")


def weight_band(run_dir: str | Path) -> tuple[float, float]:
    """The importance-weight band of the run (module docstring); [0.2, 5] when its config
    cannot be read."""
    c_max, low, high = 5.0, 0.0, 0.0
    try:
        import yaml

        algo = (yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}).get(
            "algorithm", {})
        c_max = float(algo.get("c_max", c_max))
        low, high = float(algo.get("is_mask_low", 0.0)), float(algo.get("is_mask_high", 0.0))
    except (OSError, ValueError, TypeError, AttributeError, ImportError):
        pass
    return (low if low > 0 else 1.0 / c_max, high if high > 0 else c_max)


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "episode_id" in row:
            rows.append(row)
    return rows


def episodes(rows: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows grouped by episode, in file order, each episode's steps in step order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(str(row["episode_id"]), []).append(row)
    return [sorted(steps, key=lambda r: int(r.get("step", 0))) for steps in out.values()]


def failed(ep: list[dict[str, Any]]) -> bool:
    return ep[0].get("status") not in TRAINABLE


class NotFound(LookupError):
    """No sample, or no episode that matches."""


def find_episode(run_dir: str | Path, update: int | None = None, worst: bool = False,
                 only_failed: bool = False, episode_id: str = "",
                 ) -> tuple[int, list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """(update, the chosen episode's rows, every episode of its sample): module docstring."""
    files = sample_files(run_dir)
    if not files:
        raise NotFound(f"no episode samples in {Path(run_dir) / 'episodes'} (logging."
                       "episodes_every: a launch writes one every N updates)")
    if update is not None:
        files = [(u, p) for u, p in files if u == update]
        if not files:
            have = ", ".join(str(u) for u, _ in sample_files(run_dir))
            raise NotFound(f"no sample of update {update} in {run_dir} (samples: {have})")
    searching = only_failed or bool(episode_id)
    for u, path in reversed(files if searching else files[-1:]):
        eps = episodes(read_rows(path))
        if episode_id:
            match = [e for e in eps if str(e[0]["episode_id"]).startswith(episode_id)]
        elif only_failed:
            match = [e for e in eps if failed(e)]
        elif worst:
            trained = [e for e in eps if not failed(e)] or eps
            match = sorted(trained, key=lambda e: float(e[0].get("return", 0.0)))
        else:
            match = eps
        if match:
            return u, match[0], eps
    what = f"episode {episode_id!r}" if episode_id else "failed episode" if only_failed else \
        "episode"
    raise NotFound(f"no {what} in the samples of {run_dir}")


def _num(v: Any, fmt: str = "{:+.2f}") -> str:
    return "-" if v is None else fmt.format(float(v))


def _versions(vs: list[int]) -> str:
    return "v" + "→".join(str(v) for v in vs)


def _indent(text: str, pad: str) -> str:
    return "\n".join(pad + line for line in text.splitlines() or [""])


def render_index(update: int, eps: list[list[dict[str, Any]]], s: Style) -> str:
    lines = [s(f"update {update}: {len(eps)} episodes", "bold")]
    for ep in eps:
        r = ep[0]
        status = s(r["status"], "red") if failed(ep) else r["status"]
        lines.append(f"  {str(r['episode_id'])[:12]:12s} {r.get('pick', ''):7s} {status:9s} "
                     f"return {_num(r.get('return'))}  {len(ep)} steps  "
                     f"{_versions(sorted({v for x in ep for v in x.get('versions', [])}))}")
    return "\n".join(lines)


def render(ep: list[dict[str, Any]], band: tuple[float, float], s: Style) -> str:
    """One episode, turn by turn (module docstring)."""
    r = ep[0]
    spans = sorted({v for x in ep for v in x.get("versions", [])})
    head = [
        s(f"update {r['update']} · episode {r['episode_id']} · group {r['group_id']} · "
          f"{r.get('env_name', '')} task {r.get('task_id', '')} · picked: {r.get('pick', '')}",
          "bold"),
        " · ".join([
            s(f"status {r['status']}", "red", "bold") if failed(ep) else f"status {r['status']}",
            f"outcome {_reward(r.get('outcome_reward'), s)}",
            f"return {_reward(r.get('return'), s)}",
            f"{r.get('num_steps', len(ep))} steps",
            s(f"versions {_versions(spans)} (changed mid-episode)", "yellow")
            if len(spans) > 1 else f"version {_versions(spans)}",
        ]),
    ]
    if r.get("error"):
        head.append(s(f"error: {r['error']}", "red"))
    if r.get("canaries"):
        head.append(s(f"reward-hacking canaries: {', '.join(r['canaries'])}", "magenta"))
    out = ["\n".join(head)]
    previous: list[int] | None = None
    for x in ep:
        out.append(_render_step(x, previous, band, s))
        previous = x.get("versions")
    if ep[-1].get("cut"):
        out.append(s(f"(sample cut: {ep[-1]['cut']})", "dim"))
    return "\n".join(out)


def _reward(v: Any, s: Style) -> str:
    if v is None:
        return "-"
    text = _num(v)
    return s(text, "green") if float(v) > 0 else s(text, "red") if float(v) < 0 else text


def _render_step(x: dict[str, Any], previous: list[int] | None,
                 band: tuple[float, float], s: Style) -> str:
    vs = list(x.get("versions") or [])
    version = _versions(vs)
    if len(vs) > 1:
        version = s(f"{version} (new weights within the action)", "yellow")
    elif previous is not None and vs != previous:
        version = s(f"{version} (was {_versions(previous)})", "yellow")
    parts = [s(f"step {x.get('step')}", "bold"), version, f"staleness {x.get('staleness')}"]
    if x.get("is_weight_mean") is not None:
        lo, hi = band
        w_max = float(x["is_weight_max"])
        w_min = float(x["is_weight_min"]) if x.get("is_weight_min") is not None else w_max
        text = f"IS w mean {x['is_weight_mean']:.2f} max {w_max:.2f}"
        if w_max > hi or w_min < lo:
            text = s(f"{text} min {w_min:.2f} (outside [{lo:g}, {hi:g}])", "red", "bold")
        parts.append(text)
    elif x.get("advantage") == 0.0:  # learner.skip_zero_advantage: no forward, no weight
        parts.append("left out (advantage 0)")
    parts += [f"reward {_reward(x.get('process_reward'), s)}",
              f"adv {_num(x.get('advantage'))}", f"{x.get('finish_reason', '')}"]
    lines = ["── " + " · ".join(parts)]
    if x.get("step") == 0 and x.get("context_tail"):
        lines.append(s("  context (tail):", "dim"))
        lines.append(s(_indent(x["context_tail"], "    "), "dim"))
    lines.append(s("  action:", "blue"))
    lines.append(_indent(x.get("action", ""), "    "))
    for call in x.get("tool_calls") or []:
        args = json.dumps(call.get("arguments", {}), ensure_ascii=False)
        lines.append(s(f"  tool call: {call.get('name')} {args}", "cyan", "bold"))
    results = x.get("tool_results") or []
    for res in results:
        lines.append(s("  tool result:", "cyan") + " " + _indent(res, "    ").lstrip())
    if not results and x.get("observation"):
        lines.append(s("  came back:", "dim"))
        lines.append(_indent(x["observation"], "    "))
    return "\n".join(lines)


def show(run_dir: str, update: int | None, worst: bool, only_failed: bool, episode_id: str,
         list_only: bool, color: str, stream: TextIO | None = None) -> int:
    """The command: prints (to `stream`, default stdout), returns the exit code (1: nothing
    found, said on stderr)."""
    stream = stream or sys.stdout
    try:
        u, ep, eps = find_episode(run_dir, update, worst, only_failed, episode_id)
    except NotFound as e:
        print(f"agent-r1-async episodes: {e}", file=sys.stderr)
        return 1
    s = Style(use_color(color, stream))
    if list_only:
        print(render_index(u, eps, s), file=stream)
        return 0
    print(render(ep, weight_band(run_dir), s), file=stream)
    return 0

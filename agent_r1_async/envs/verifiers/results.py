"""What a served verifiers episode comes to: its streamed traces assembled, then one reward.

The EnvServer streams each trace as deltas (verifiers `serve/delta.py`): a trace appears with
`open` (its header), list fields grow by appended items (`calls`, `errors`, ...), scalar
fields are re-sent whole under `set` (`agent`, `rewards`, `metrics`, `is_timeout`, ...), and a
retried attempt's trace is dropped with `discard`. The reply then lists the finished traces
with their sizes. `outcome(deltas, reply)` keeps what training needs:

- the reply must say `success`, and every listed trace must have assembled with as many
  calls as the reply counts (a lost delta is an error, never a silent partial trace);
- only traces of a trainable seat (`agent.trainable`) count; exactly one must remain, since
  its model calls are the session's steps (a multi-seat episode would interleave seats);
- a trace that recorded errors, timed out, or has a reward that scoring left unset fails the
  episode naming the first cause;
- the reward is verifiers' own: the sum of score x weight over the trace's named rewards;
  each named reward and each real-valued metric is kept as an episode metric.
"""

from __future__ import annotations

import math
from typing import Any

from agent_r1_async.envs.agent import AgentFailed, AgentOutcome

_LISTS = ("calls", "errors")


def assemble(deltas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Trace id -> the trace's fields, applying `deltas` in order (module docstring)."""
    traces: dict[str, dict[str, Any]] = {}
    for delta in deltas:
        tid = str(delta.get("trace", ""))
        if delta.get("discard"):
            traces.pop(tid, None)
            continue
        trace = traces.get(tid)
        if trace is None:
            trace = traces[tid] = {**(delta.get("open") or {}), **{f: [] for f in _LISTS}}
        for f in _LISTS:
            trace[f].extend(delta.get(f) or [])
        trace.update(delta.get("set") or {})
    return traces


def _first_error(errors: list[Any]) -> tuple[str, str]:
    first = errors[0] if isinstance(errors[0], dict) else {"message": str(errors[0])}
    message = str(first.get("message") or "").strip().splitlines()
    return str(first.get("type") or "Error"), message[0][:300] if message else ""


def _real(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def outcome(deltas: list[dict[str, Any]], reply: dict[str, Any]) -> AgentOutcome:
    """The episode's reward and metrics; AgentFailed when it cannot train (module docstring)."""
    if not reply.get("success", False):
        raise AgentFailed(f"the env server failed the run: {reply.get('error')}", "server")
    traces = assemble(deltas)
    listed = []
    for summary in reply.get("traces") or []:
        trace = traces.get(str(summary.get("id")))
        if trace is None or len(trace["calls"]) != summary.get("calls"):
            got = "no trace" if trace is None else f"{len(trace['calls'])} calls"
            raise AgentFailed(f"trace {summary.get('id')}: assembled {got}, the server "
                                f"reports {summary.get('calls')} calls", "assembly")
        listed.append(trace)
    if not listed:
        errors = (reply.get("head") or {}).get("errors") or []
        why = ": ".join(_first_error(errors)) if errors else "no trace"
        raise AgentFailed(f"the episode produced no trace ({why})", "no_trace")
    trainable = [t for t in listed if (t.get("agent") or {}).get("trainable", True)]
    if len(trainable) != 1:
        raise AgentFailed(f"{len(trainable)} of the episode's {len(listed)} traces are of a "
                            "trainable seat; one is needed (its calls are the episode's steps)",
                            "untrainable" if not trainable else "multi_seat")
    trace = trainable[0]
    if trace.get("is_timeout"):
        raise AgentFailed("verifiers timed the rollout out", "timeout", "timeout")
    if trace["errors"]:
        kind, message = _first_error(trace["errors"])
        raise AgentFailed(f"{kind}: {message}", kind)
    rewards = trace.get("rewards") or {}
    unset = sorted(name for name, r in rewards.items()
                   if not isinstance(r, dict) or _real(r.get("score")) is None)
    if not rewards or unset:
        what = f"reward {unset[0]!r} was not scored" if unset else "the taskset has no reward"
        raise AgentFailed(what, "no_reward")
    total, metrics = 0.0, {}
    for name, r in rewards.items():
        score, weight = float(r["score"]), _real(r.get("weight", 1.0))
        total += score * (1.0 if weight is None else weight)
        metrics[name] = score
    for name, value in (trace.get("metrics") or {}).items():
        real = _real(value)
        if real is not None:
            metrics.setdefault(name, real)
    metrics["vf_calls"] = float(len(trace["calls"]))
    return AgentOutcome(total, metrics)

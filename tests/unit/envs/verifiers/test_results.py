"""A served episode's streamed traces into its reward and metrics (envs/verifiers/results.py),
on hand-written deltas shaped like verifiers 0.4's `serve/delta.py` output."""

from __future__ import annotations

from typing import Any

import pytest

from agent_r1_async.envs.agent import AgentFailed
from agent_r1_async.envs.verifiers.results import assemble, outcome

CALL = {"node": 2, "finish_reason": "stop"}


def trace_deltas(tid: str = "t1", calls: int = 2, trainable: bool = True,
                 rewards: dict[str, Any] | None = None, **final: Any) -> list[dict[str, Any]]:
    """A trace opened, its calls appended one delta each, then scored."""
    out: list[dict[str, Any]] = [{"trace": tid, "open": {"id": tid, "version": 1},
                                  "set": {"agent": {"trainable": trainable}, "rewards": {},
                                          "ok": False}}]
    out += [{"trace": tid, "calls": [CALL], "nodes": [{}]} for _ in range(calls)]
    scored = {"correct": {"score": 1.0, "weight": 0.5},
              "format": {"score": 1.0, "weight": 0.25}} if rewards is None else rewards
    out.append({"trace": tid, "set": {"rewards": scored,
                                      "metrics": {"tool_calls": 1, "note": "text"}, "ok": True,
                                      **final}})
    return out


def reply(*traces: tuple[str, int], success: bool = True, **kw: Any) -> dict[str, Any]:
    return {"success": success, "traces": [{"id": t, "nodes": n, "calls": n} for t, n in traces],
            **kw}


def test_the_reward_is_verifiers_weighted_sum_and_every_score_is_a_metric():
    got = outcome(trace_deltas(), reply(("t1", 2)))
    # 1.0 x 0.5 + 1.0 x 0.25
    assert got.reward == 0.75
    assert got.metrics == {"correct": 1.0, "format": 1.0, "tool_calls": 1.0, "vf_calls": 2.0}


def test_a_discarded_attempt_is_dropped_and_a_retry_counts():
    deltas = [*trace_deltas("old", calls=1), {"trace": "old", "discard": True},
              *trace_deltas("new", calls=2, rewards={"correct": {"score": 0.0, "weight": 1.0}})]
    assert set(assemble(deltas)) == {"new"}
    got = outcome(deltas, reply(("new", 2)))
    assert (got.reward, got.metrics["vf_calls"]) == (0.0, 2.0)


def test_only_the_trainable_seat_counts():
    deltas = [*trace_deltas("judge", calls=1, trainable=False,
                            rewards={"x": {"score": 9.0, "weight": 1.0}}),
              *trace_deltas("agent", calls=3, rewards={"correct": {"score": 1.0, "weight": 1.0}})]
    got = outcome(deltas, reply(("judge", 1), ("agent", 3)))
    assert (got.reward, got.metrics["vf_calls"]) == (1.0, 3.0)


def failure(deltas: list[dict[str, Any]], rep: dict[str, Any]) -> AgentFailed:
    with pytest.raises(AgentFailed) as err:
        outcome(deltas, rep)
    assert "\n" not in err.value.message
    return err.value


@pytest.mark.parametrize("deltas, rep, kind, status, message", [
    ([], reply(success=False, error="ValidationError: task_data"), "server", "env_error",
     "the env server failed the run: ValidationError: task_data"),
    (trace_deltas(calls=1), reply(("t1", 2)), "assembly", "env_error",
     "trace t1: assembled 1 calls, the server reports 2 calls"),
    ([], reply(head={"errors": [{"type": "SandboxError", "message": "no box\nat line 3"}]}),
     "no_trace", "env_error", "the episode produced no trace (SandboxError: no box)"),
    (trace_deltas(trainable=False), reply(("t1", 2)), "untrainable", "env_error",
     "0 of the episode's 1 traces are of a trainable seat"),
    ([*trace_deltas("a"), *trace_deltas("b")], reply(("a", 2), ("b", 2)), "multi_seat",
     "env_error", "2 of the episode's 2 traces are of a trainable seat"),
    (trace_deltas(is_timeout=True), reply(("t1", 2)), "timeout", "timeout",
     "verifiers timed the rollout out"),
    ([*trace_deltas(), {"trace": "t1", "errors": [{"type": "HarnessError", "message": "exit 1"}]}],
     reply(("t1", 2)), "HarnessError", "env_error", "HarnessError: exit 1"),
    (trace_deltas(rewards={"correct": None}), reply(("t1", 2)), "no_reward", "env_error",
     "reward 'correct' was not scored"),
    (trace_deltas(rewards={}), reply(("t1", 2)), "no_reward", "env_error",
     "the taskset has no reward"),
    (trace_deltas(rewards={"r": {"score": float("nan"), "weight": 1.0}}), reply(("t1", 2)),
     "no_reward", "env_error", "reward 'r' was not scored"),
])
def test_an_episode_that_cannot_train_fails_naming_the_cause(deltas, rep, kind, status,
                                                             message):
    err = failure(deltas, rep)
    assert (err.kind, err.status) == (kind, status)
    assert err.message.startswith(message), err.message

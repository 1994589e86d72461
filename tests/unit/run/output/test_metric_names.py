"""An update's record (run/output/metric_names.py): actor throughput averaged between records
(`ActorRates`), not over the actors' last 5 s window."""

from __future__ import annotations

import pytest

from agent_r1_async.run.output.metric_names import ActorRates, merge_metrics


def _stats(t: float, tokens_total: int, ended: int, window_rate: float) -> dict:
    return {"time": t, "tokens_total": tokens_total, "episodes_done": ended - 1,
            "episodes_failed": 1, "tokens_per_s": window_rate, "episodes_per_s": 0.0,
            "weight_sync_latency_s": 0.5, "policy_version": 3, "episodes_in_flight": 0,
            "gen_time_s": 0.0, "env_time_s": 0.0}


def _merge(rates, actors: dict) -> dict:
    record, _ = merge_metrics({"metrics": {"version": 1}}, {"actors": actors}, rates)
    return record


def test_rates_are_differences_of_totals_between_records():
    rates = ActorRates()
    # first record: no history, the actors' own 5 s window rates (a0 idle at that moment)
    first = _merge(rates, {"a0": _stats(100.0, 1_000, 8, 0.0), "a1": _stats(101.0, 500, 4, 30.0)})
    assert first["actors/tokens_per_s"] == 30.0
    # 40 s later a0 made 2,400 tokens and 16 episodes, yet its last window was idle again
    second = _merge(rates, {"a0": _stats(140.0, 3_400, 24, 0.0), "a1": _stats(121.0, 900, 6, 0.0)})
    assert second["actor/a0/tokens_per_s"] == pytest.approx(2_400 / 40)   # 60
    assert second["actor/a0/episodes_per_s"] == pytest.approx(16 / 40)   # 0.4
    assert second["actor/a0/episodes_done"] == 23  # its trainable total: 24 ended, 1 failed
    assert second["actor/a1/tokens_per_s"] == pytest.approx(400 / 20)    # 20
    assert second["actors/tokens_per_s"] == pytest.approx(80.0)
    assert second["actors/episodes_per_s"] == pytest.approx(0.4 + 2 / 20)


def test_same_report_or_a_restarted_actor_falls_back_to_the_window_rate():
    rates = ActorRates()
    _merge(rates, {"a0": _stats(100.0, 1_000, 8, 12.0)})
    same = _merge(rates, {"a0": _stats(100.0, 1_000, 8, 12.0)})  # no new report since
    assert same["actors/tokens_per_s"] == 12.0
    restarted = _merge(rates, {"a0": _stats(150.0, 200, 1, 7.0)})  # counters began again
    assert restarted["actors/tokens_per_s"] == 7.0
    after = _merge(rates, {"a0": _stats(160.0, 700, 3, 0.0)})  # and from there, differences
    assert after["actors/tokens_per_s"] == pytest.approx(50.0)


def test_without_rates_the_window_rates_are_reported():
    record = _merge(None, {"a0": _stats(100.0, 1_000, 8, 12.5)})
    assert record["actors/tokens_per_s"] == 12.5 and record["actor/a0/tokens_per_s"] == 12.5

"""An update's numbers under the names a user looks for, in one flat record.

`merge_metrics` flattens the learner's metrics (renamed: `staleness_mean` -> `staleness/mean`,
the rest under `learner/`), the buffer's stats (`buffer/...`, drops by reason, episodes by
length bucket) and each actor's report (`actor/<id>/...`, summed under `actors/...`) into the
record the sinks log (run/output/metrics.py), with its histograms beside it. `ActorRates`
keeps the actors' throughput as averages between records.
"""

from __future__ import annotations

from typing import Any

from agent_r1_async.buffers.lengths import WIRE_PREFIX, length_metrics
from agent_r1_async.run.output.histograms import Binned, Hist

# Learner metric names -> the names a user looks for in W&B.
_RENAME = {
    "staleness_mean": "staleness/mean",
    "staleness_max": "staleness/max",
    "is_weight_mean": "is_weight/mean",
    "is_weight_max": "is_weight/max",
    "mismatch_kl": "is_weight/mismatch_kl",
    "masked_frac": "is_weight/masked_frac",
    "idle_frac": "learner/idle_ratio",
}


class ActorRates:
    """Actor throughput between two metric records, from the actors' cumulative counters.

    An actor's own `tokens_per_s` covers its last stats window (`actors.stats_interval_s`,
    5 s): a learner-bound actor that waits for admission at that moment reads 0 although it
    generated a full batch since the last update. Here each actor's rates are the differences
    of its totals (`tokens_total`, episodes ended) between the reports seen at consecutive
    records, over the difference of their times; the first record uses the window rates.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}

    def __call__(self, actor_id: str, stats: dict[str, Any]) -> tuple[float, float]:
        """(tokens/s, episodes/s) of this actor since its report at the previous record."""
        now = (float(stats["time"]), int(stats.get("tokens_total", 0)),
               int(stats["episodes_done"]) + int(stats["episodes_failed"]))
        prev = self._last.get(actor_id)
        self._last[actor_id] = now
        if prev is None or now[0] <= prev[0] or now[1] < prev[1]:  # first, same report, restart
            return float(stats["tokens_per_s"]), float(stats["episodes_per_s"])
        dt = now[0] - prev[0]
        return (now[1] - prev[1]) / dt, (now[2] - prev[2]) / dt


def merge_metrics(
    update: dict[str, Any], buffer: dict[str, Any], rates: ActorRates | None = None
) -> tuple[dict, dict]:
    """Flatten learner + buffer + actor metrics into one record and its histograms.

    `rates` (kept across records) turns actor throughput into averages since the previous
    record; without it the actors' last-window rates are reported.
    """
    out: dict[str, Any] = {}
    for k, v in update["metrics"].items():
        if "/" in k or k == "version":
            out[k] = v
        else:
            out[_RENAME.get(k, f"learner/{k}")] = v
    for key in ("groups_ready", "groups_assembling", "episodes_stored", "bytes_stored",
                "in_flight_groups", "accepted_groups", "sampled_groups", "ingest_records_per_s",
                "records_per_frame", "episode_bytes_mean"):
        if key in buffer:
            out[f"buffer/{key}"] = buffer[key]
    drops = buffer.get("drops", {})
    for reason, count in drops.items():
        if not reason.startswith(WIRE_PREFIX):
            out[f"buffer/drops/{reason}"] = count
    out.update(length_metrics(drops))  # episodes generated, trained, dropped by length
    actors = buffer.get("actors", {})
    if actors:
        tok_total = eps_total = 0.0
        for actor_id, stats in actors.items():
            for k in ("weight_sync_latency_s", "policy_version", "episodes_in_flight",
                      "episodes_done", "gen_time_s", "env_time_s"):
                out[f"actor/{actor_id}/{k}"] = stats[k]
            tok, eps = (rates(actor_id, stats) if rates is not None
                        else (stats["tokens_per_s"], stats["episodes_per_s"]))
            out[f"actor/{actor_id}/tokens_per_s"] = tok
            out[f"actor/{actor_id}/episodes_per_s"] = eps
            tok_total += tok
            eps_total += eps
        out["actors/tokens_per_s"] = tok_total
        out["actors/episodes_per_s"] = eps_total
        out["actors/weight_sync_latency_s"] = max(s["weight_sync_latency_s"] for s in actors.values())
        # Counters that are each actor's totals since it started, summed over the actors.
        for field, prefix in (("env_errors", "env/errors"),
                              ("endpoint_requests", "endpoint/requests")):
            totals: dict[str, int] = {}
            for stats in actors.values():
                for key, n in stats.get(field, {}).items():
                    totals[key] = totals.get(key, 0) + int(n)
            for key, n in totals.items():
                out[f"{prefix}/{key}"] = n
    hist = {int(k): int(v) for k, v in update.get("staleness_hist", {}).items()}
    hists: dict[str, Hist] = {"staleness/hist": hist}
    weights = update.get("is_weight_hist") or {}
    if weights.get("counts") and len(weights.get("edges", [])) == len(weights["counts"]) + 1:
        hists["is_weight/hist"] = Binned(list(weights["edges"]), list(weights["counts"]))
    return out, hists

"""What the buffer's stats show over time: a launch that makes no progress and why
(`StallWatch`), an actor's endpoint refusing a stream of requests (`RefusalWatch`).

The launch's events (run/output/events.py) look at the buffer's stats every few seconds while
the launch waits for an update, and say what these find, once each.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from agent_r1_async.run.output.lines import first_line

STALL_S = 60.0
"""No group ready (or sampled) and no new learner version for this long, while actors end
episodes or the buffer refuses records: the launch says why it makes no progress."""
_START_FACTOR = 3
"""Before any actor has reported, a stall is said after this many `STALL_S` (start-up)."""
_REFUSED = re.compile(r"buffer: record refused(?: \(\d+ so far\))?: (.*)$")

REFUSED_FLOOD = 100
REFUSED_WINDOW_S = 60.0
REFUSED_QUIET_S = 300.0


class RefusalWatch:
    """Notices an actor's endpoint refusing a sustained stream of requests (401 and other
    4xx, from the actors' `endpoint_requests` totals); `observe` gives the line to say."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, list[tuple[float, int, int]]] = {}
        self._said: dict[str, float] = {}

    def observe(self, actors: dict[str, Any]) -> list[tuple[str, str]]:
        """(actor id, line) for each actor whose endpoint refused at least `REFUSED_FLOOD`
        requests in the last `REFUSED_WINDOW_S`, not said in the last `REFUSED_QUIET_S`."""
        now, out = self.clock(), []
        for actor_id, stats in actors.items():
            req = stats.get("endpoint_requests") or {}
            n401, n4xx = int(req.get("401", 0)), int(req.get("4xx", 0))
            seen = self._seen.setdefault(actor_id, [])
            if seen and n401 + n4xx < seen[-1][1] + seen[-1][2]:
                seen.clear()  # a restarted actor counts from 0
            seen.append((now, n401, n4xx))
            while len(seen) > 1 and seen[1][0] <= now - REFUSED_WINDOW_S:
                seen.pop(0)
            t0, a0, b0 = seen[0]
            d401, d4xx = n401 - a0, n4xx - b0
            if d401 + d4xx < REFUSED_FLOOD or now - self._said.get(actor_id, -1e18) < REFUSED_QUIET_S:
                continue
            self._said[actor_id] = now
            url = stats.get("endpoint_url") or "(address in its log)"
            out.append((actor_id, (
                f"{actor_id}: its generation endpoint {url} refused {d401 + d4xx} requests in "
                f"the last {max(now - t0, 1.0):.0f} s ({d401} without a valid token, {d4xx} "
                "malformed): something on this machine is calling it (metrics: "
                "endpoint/requests/*)")))
        return out


def first_refusal(log_dir: Path) -> str | None:
    """The first record refusal the buffer logged (buffers/buffer.py: the first few and then
    one in a thousand are logged), from RUN_DIR/logs/buffer.log (its rotated copy first)."""
    for path in (log_dir / "buffer.log.1", log_dir / "buffer.log"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    found = _REFUSED.search(line.rstrip("\n"))
                    if found:
                        return first_line(found.group(1), 240)
        except OSError:
            continue
    return None


class StallWatch:
    """Whether a launch makes no progress, and why, from the buffer's stats alone.

    Progress is a new learner version, or more groups ready or sampled than at the previous
    look. Once there has been none for `stall_s`, `observe` returns (cause, text) for the
    first of these that holds, once per stall:

    - "actors dead": no actor has reported (ActorStats) within `stall_s`;
    - "every episode refused": the buffer refused records meanwhile (`invalid_record/*`);
    - "no groups ready": actors ended episodes meanwhile, and none made a group ready;
    - "learner waiting": the learner's sample request waits (`sample_waiting`) for more groups
      than are ready, and nothing ends: what it waits on is the groups in flight, said with
      the actors that hold them and how long each has made no progress (a hung actor keeps
      its credits until `launch.unresponsive_s`).

    A learner busy with a long update while the actors wait (admission control) is none of
    these: no sample request waits, nothing ends and nothing is refused, and nothing is said.

    `failing` holds (seconds, text) while the stall is "no groups ready" and most of the
    episodes ended since the last progress failed (some may succeed: a server that serves one
    episode of a group of 8 makes every group too small), updated at every look; the
    supervisor stops the run on it after `launch.stop_after_stall_s`.
    """

    def __init__(self, stall_s: float = STALL_S, clock: Any = time.monotonic) -> None:
        self.stall_s, self.clock = stall_s, clock
        self._mark: tuple[int, int] | None = None
        self._since = 0.0
        self._base = (0, 0)  # episodes ended and failed at the last progress
        self._base_drops: dict[str, int] = {}  # the buffer's drops then
        self._said = False
        self.failing: tuple[float, str] | None = None

    def observe(self, buffer: dict[str, Any]) -> tuple[str, str] | None:
        now = self.clock()
        actors: dict[str, Any] = buffer.get("actors", {})
        ended = sum(int(s.get("episodes_done", 0)) + int(s.get("episodes_failed", 0))
                    for s in actors.values())
        failed = sum(int(s.get("episodes_failed", 0)) for s in actors.values())
        drops = buffer.get("drops", {})
        refused = int(drops.get("invalid_record", 0))
        mark = (int(buffer.get("learner_version", 0)),
                int(buffer.get("groups_ready", 0)) + int(buffer.get("sampled_groups", 0)))
        prev, self._mark = self._mark, mark
        if prev is None or mark[0] != prev[0] or mark[1] > prev[1]:
            self._since, self._base, self._said = now, (ended, failed), False
            self._base_drops = {k: int(v) for k, v in drops.items()}
            self.failing = None
            return None
        # An actor restarted by Ray counts from 0 again: its totals are the new baseline.
        self._base = (min(self._base[0], ended), min(self._base[1], failed))
        waited = now - self._since
        d_ended, d_failed = ended - self._base[0], failed - self._base[1]
        d_refused = refused - self._base_drops.get("invalid_record", 0)
        self.failing = None
        if waited >= self.stall_s and 2 * d_failed > d_ended and d_refused == 0 and actors:
            self.failing = (waited, self._no_groups(waited, actors, d_ended, d_failed,
                                                    float(buffer.get("time", time.time()))))
        if self._said or waited < self.stall_s:
            return None
        t = float(buffer.get("time", time.time()))
        seen = {a: t - float(s.get("time", 0.0)) for a, s in actors.items()}  # report ages
        alive = [a for a, age in seen.items() if age < self.stall_s]
        head = f"no progress for {waited:.0f} s"
        if not actors:  # none has reported yet: engines can take minutes to load
            if waited < _START_FACTOR * self.stall_s:
                return None
            self._said = True
            return "actors dead", (f"{head}: actors dead or not started: no actor has reported "
                                   "yet")
        if not alive:
            ages = ", ".join(f"{a} {age:.0f} s ago" for a, age in sorted(seen.items()))
            self._said = True
            return "actors dead", (f"{head}: actors dead: no actor has reported in the last "
                                   f"{self.stall_s:.0f} s (last reports: {ages})")
        if d_refused > 0:
            reasons = ", ".join(
                f"{k.split('/', 1)[1]} {n}" for k, v in sorted(drops.items())
                if k.startswith("invalid_record/")
                and (n := int(v) - self._base_drops.get(k, 0)) > 0)
            self._said = True
            return "every episode refused", (
                f"{head}: every episode refused: the buffer refused {d_refused} records "
                f"({reasons}) and no group became ready")
        if d_ended > 0:
            self._said = True
            return "no groups ready", self._no_groups(waited, actors, d_ended, d_failed, t)
        waiting = int(buffer.get("sample_waiting", 0))
        if waiting > int(buffer.get("groups_ready", 0)):
            self._said = True
            return "learner waiting", f"{head}: {waiting_on(buffer)}"
        return None


    @staticmethod
    def _no_groups(waited: float, actors: dict[str, Any], ended: int, failed: int,
                   t: float) -> str:
        """The "no groups ready" line, with the freshest report's latest failure."""
        newest = max(actors, key=lambda a: float(actors[a].get("time", 0.0)))
        last = str(actors[newest].get("last_error", ""))
        why = f"; latest failure: {first_line(last, 240)}" if failed and last else ""
        return (f"no progress for {waited:.0f} s: no groups ready: actors ended {ended} "
                f"episodes ({failed} failed{why}) and none made a group ready")


def waiting_on(buffer: dict[str, Any]) -> str:
    """What a learner waiting for data waits on, from the buffer's stats: the groups it asks
    for, the ready ones, and the groups in flight with the actors that hold them."""
    credits = {a: int(n) for a, n in buffer.get("actor_credits", {}).items() if int(n) > 0}
    silence = buffer.get("actor_silence_s", {})
    holders = "; ".join(
        f"{a} holds {n}" + (f", no progress for {float(silence[a]):.0f} s" if a in silence else "")
        for a, n in sorted(credits.items()))
    return (f"the learner waits for {int(buffer.get('sample_waiting', 0))} ready groups; the "
            f"buffer has {int(buffer.get('groups_ready', 0))} ready and "
            f"{int(buffer.get('in_flight_groups', 0))} in flight" + (f" ({holders})" if holders else ""))

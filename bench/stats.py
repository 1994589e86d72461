"""Spread of repeated measurements for the benches under bench/: mean ± a t confidence interval,
mean ± the standard deviation, median and range, the machine's load while a bench ran, and the
peak memory of a process tree.

The 2-core development box is shared and noisy, so every headline states its spread over
repeats and the load it was measured under; no scipy here, so Student's t quantiles for the
two-sided 95 % interval come from a table (df ≤ 30; the normal 1.96 beyond).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from collections.abc import Sequence

# two-sided 95 %: t_{0.975, df} for df = 1..30
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df: int) -> float:
    """Student's t quantile 0.975 with `df` degrees of freedom (1.96 past 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of the two-sided 95 % t interval); half-width nan for one value."""
    if not values:
        raise ValueError("mean_ci of no values")
    m = statistics.fmean(values)
    if len(values) == 1:
        return m, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values))
    return m, t975(len(values) - 1) * se


def paired_diffs(seeds: Sequence[int], diffs: Sequence[float]) -> dict:
    """Per-seed differences of two arms, their mean and two-sided 95 % t interval [lo, hi]
    (nan for one seed) and whether it excludes 0."""
    m, half = mean_ci(diffs)
    lo, hi = m - half, m + half
    return {"seeds": list(seeds), "diffs": list(diffs), "mean": m, "half": half, "lo": lo,
            "hi": hi, "excludes_zero": not math.isnan(half) and (lo > 0 or hi < 0)}


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation, n − 1 in the denominator); sd nan for one value."""
    if not values:
        raise ValueError("mean_sd of no values")
    m = statistics.fmean(values)
    return m, statistics.stdev(values) if len(values) > 1 else math.nan


def fmt_ci(values: Sequence[float], digits: int = 3) -> str:
    """'mean ± half (n=k)' as the benches print it."""
    m, h = mean_ci(values)
    half = "n/a" if math.isnan(h) else f"{h:.{digits}f}"
    return f"{m:.{digits}f} ± {half} (n={len(values)})"


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    if not values:
        raise ValueError("median_range of no values")
    return statistics.median(values), min(values), max(values)


def fmt_spread(values: Sequence[float], digits: int = 2, unit: str = "") -> str:
    """'median (min–max, n=k)'."""
    med, lo, hi = median_range(values)
    return f"{med:.{digits}f}{unit} ({lo:.{digits}f}–{hi:.{digits}f}, n={len(values)})"


def binomial_se(p: float, n: int) -> float:
    """Standard error of a success rate p measured on n independent tasks."""
    if n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_se needs 0 <= p <= 1 and n >= 1, got p={p}, n={n}")
    return math.sqrt(p * (1.0 - p) / n)


def load_line() -> str:
    """The 1/5/15-minute load averages and the core count, for a bench's header."""
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f} on {os.cpu_count()} cores"


def cpu_and_amx() -> tuple[str, bool]:
    """The CPU's model name (as `lscpu` gives it) and whether it has AMX (`amx_bf16`): bf16
    speed, and so a time-budgeted run's work, differ between CPUs with and without it."""
    from agent_r1_async.bf16.hardware import cpu_flags, cpu_name

    return cpu_name(), "amx_bf16" in cpu_flags()


def machine_line() -> str:
    """The CPU (with family / model / stepping), its cores and whether it has AMX, for a
    result's record."""
    from agent_r1_async.bf16.hardware import cpu_model

    amx = "AMX" if cpu_and_amx()[1] else "no AMX"
    return f"{cpu_model()}, {os.cpu_count()} cores, {amx}"


def machine_kind(machine: str) -> str:
    """`machine_line`'s text in short, for a table: the CPU's name and whether it has AMX."""
    return f"{machine.split(' (')[0]}, {machine.rsplit(', ', 1)[-1]}" if machine else ""


def utc_date(t: float | None = None) -> str:
    """`t` (default now) as a result's date: `YYYY-MM-DD HH:MM UTC`."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


class PeakRSS:
    """Peak summed RSS (GB) of this process and all its descendants, sampled every 2 s."""

    def __init__(self) -> None:
        self.peak_gb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(2.0):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # exited between listing and reading
                    total += p.memory_info().rss
            self.peak_gb = max(self.peak_gb, total / 2**30)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

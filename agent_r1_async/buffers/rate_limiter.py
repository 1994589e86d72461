"""Samples-per-insert rate limiter, in the spirit of Reverb's `SampleToInsertRatio`.

The limiter tracks one number, `diff = samples_per_insert × inserts − samples` (in groups),
and keeps it inside a window around its steady-state value:

    min_diff = samples_per_insert × min_size − error_buffer
    max_diff = samples_per_insert × min_size + error_buffer

- sampling k groups is allowed when the buffer holds >= max(min_size, k) groups and
  `diff − k >= min_diff` (the learner may not run ahead of the actors);
- admitting (granting credits for) n more groups is allowed while
  `diff + samples_per_insert × (pending + n) <= max_diff`, where `pending` counts groups
  already granted but not yet inserted (the actors may not run ahead of the learner).
  Inserts themselves are never refused: data that arrives is kept. The actors are slowed
  through their credits instead.

`error_buffer = max(spi_tolerance, batch_groups)`: the window is widened to at least one
batch, otherwise a batch larger than the window could never be drawn (a deadlock).

A group removed before it was sampled `samples_per_insert` times (stale, reuse cap below the
ratio) forgives its missing samples (`diff` drops by the remainder), so removals can never
freeze the actors.
"""

from __future__ import annotations


class SampleToInsertRatio:
    def __init__(
        self,
        samples_per_insert: float,
        min_size: int,
        tolerance: float,
        batch_groups: int = 1,
    ) -> None:
        if samples_per_insert <= 0 or min_size < 1 or tolerance < 0:
            raise ValueError(
                f"bad rate limiter: samples_per_insert={samples_per_insert} (> 0), "
                f"min_size={min_size} (>= 1), tolerance={tolerance} (>= 0)"
            )
        self.samples_per_insert = samples_per_insert
        self.min_size = min_size
        error_buffer = max(tolerance, float(batch_groups))
        self.min_diff = samples_per_insert * min_size - error_buffer
        self.max_diff = samples_per_insert * min_size + error_buffer
        self.diff = 0.0
        self.inserts = 0
        self.samples = 0

    def can_sample(self, k: int, size: int) -> bool:
        return size >= max(self.min_size, k) and self.diff - k >= self.min_diff

    def insert_room(self, pending: int) -> int:
        """How many more groups may be admitted, given `pending` granted but not inserted."""
        room = (self.max_diff - self.diff) / self.samples_per_insert - pending
        return max(0, int(room + 1e-9))

    def on_insert(self) -> None:
        self.inserts += 1
        self.diff += self.samples_per_insert

    def on_sample(self, k: int) -> None:
        self.samples += k
        self.diff -= k

    def on_remove(self, times_sampled: int) -> None:
        """A group left the buffer after `times_sampled` samples; forgive the ones it missed."""
        self.diff -= max(0.0, self.samples_per_insert - times_sampled)

    def state(self) -> tuple[float, int, int]:
        return self.diff, self.inserts, self.samples

    def restore(self, diff: float, inserts: int, samples: int) -> None:
        self.diff, self.inserts, self.samples = diff, inserts, samples

"""Array-backed sum-tree: O(log n) add, update, remove and prefix-sum search over priorities.

Layout: a complete binary tree over `capacity` (a power of two) leaves, stored in one flat
list. Node 1 is the root, node i has children 2i and 2i+1, leaf for slot s is node
`capacity + s`. Every internal node holds the sum of its children, so the root is the total.

Design choices
- Internal nodes are *recomputed* from their two children on every update (not adjusted by a
  delta), so floating-point error never accumulates over millions of updates.
- A Python list, not numpy: the hot paths touch ~log2(n) single elements, where list indexing
  is several times faster than numpy scalar access.
- Free slots are reused (a stack); the tree doubles its capacity when full (O(n) rebuild,
  amortized O(1) per add). A free slot has priority 0 and can never be drawn.
- Sampling without replacement zeroes each drawn leaf for the rest of the draw and restores
  it afterwards: k draws cost O(k log n).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


class SumTree:
    """Priorities of items in slots, with proportional sampling."""

    def __init__(self, capacity: int = 1024) -> None:
        cap = 1
        while cap < max(1, capacity):
            cap *= 2
        self._cap = cap
        self._tree = [0.0] * (2 * cap)
        self._free: list[int] = []
        self._next = 0  # slots >= _next have never been used
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def total(self) -> float:
        return self._tree[1]

    def get(self, slot: int) -> float:
        return self._tree[self._cap + slot]

    def add(self, priority: float) -> int:
        """Store a new item with `priority` (> 0) and return its slot."""
        _check_priority(priority)
        if self._free:
            slot = self._free.pop()
        else:
            if self._next == self._cap:
                self._grow()
            slot = self._next
            self._next += 1
        self._len += 1
        self._set(slot, priority)
        return slot

    def update(self, slot: int, priority: float) -> None:
        _check_priority(priority)
        self._check_used(slot)
        self._set(slot, priority)

    def remove(self, slot: int) -> None:
        self._check_used(slot)
        self._set(slot, 0.0)
        self._free.append(slot)
        self._len -= 1

    def find(self, u: float) -> int:
        """The slot whose cumulative-priority interval contains u, for 0 <= u < total."""
        tree, i = self._tree, 1
        while i < self._cap:
            left = 2 * i
            # Go right only if u is past the left sum AND the right side holds mass; the second
            # test keeps float round-off from landing on an empty (zero) leaf.
            if u >= tree[left] and tree[left + 1] > 0.0:
                u -= tree[left]
                i = left + 1
            elif tree[left] > 0.0:
                i = left
            else:
                i = left + 1
        return i - self._cap

    def sample(self, k: int, rng: random.Random, replace: bool = False,
               exclude: Sequence[int] = ()) -> list[int]:
        """Draw k slots with probability ∝ priority (each at most once unless `replace`),
        never one of `exclude`."""
        if k < 0 or (not replace and k > self._len - len(exclude)):
            raise ValueError(f"cannot draw {k} of {self._len - len(exclude)} items without "
                             "replacement")
        saved: list[tuple[int, float]] = []
        for slot in exclude:
            saved.append((slot, self.get(slot)))
            self._set(slot, 0.0)
        if k > 0 and self.total <= 0.0:
            for slot, p in saved:
                self._set(slot, p)
            raise ValueError("cannot sample from an empty sum-tree")
        slots: list[int] = []
        try:
            for _ in range(k):
                slot = self.find(rng.random() * self.total)
                slots.append(slot)
                if not replace:
                    saved.append((slot, self.get(slot)))
                    self._set(slot, 0.0)
        finally:
            for slot, p in saved:
                self._set(slot, p)
        return slots

    def _set(self, slot: int, priority: float) -> None:
        tree = self._tree
        i = self._cap + slot
        tree[i] = priority
        i //= 2
        while i >= 1:
            tree[i] = tree[2 * i] + tree[2 * i + 1]
            i //= 2

    def _grow(self) -> None:
        old_cap, leaves = self._cap, self._tree[self._cap :]
        self._cap = 2 * old_cap
        self._tree = [0.0] * (2 * self._cap)
        self._tree[self._cap : self._cap + old_cap] = leaves
        for i in range(self._cap - 1, 0, -1):
            self._tree[i] = self._tree[2 * i] + self._tree[2 * i + 1]

    def _check_used(self, slot: int) -> None:
        if not 0 <= slot < self._next or self._tree[self._cap + slot] == 0.0:
            raise KeyError(f"sum-tree slot {slot} holds no item")


def _check_priority(priority: float) -> None:
    if not (priority > 0.0 and math.isfinite(priority)):
        raise ValueError(f"priority must be finite and > 0, got {priority!r}")

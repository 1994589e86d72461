"""A settable clock and learner-version source (the buffer takes both as callables)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeVersion:
    def __init__(self, v: int = 0) -> None:
        self.v = v

    def __call__(self) -> int:
        return self.v

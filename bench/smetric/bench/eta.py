"""The bench's overall progress line: runs done of the runs planned, wall time so far, and an
estimate of the time left (the mean wall time of the finished runs times the runs still to go)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def duration_text(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``; ``?`` for a negative or non-finite value."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass(frozen=True, slots=True)
class RunCount:
    """How many (row, rate, seed) runs the bench plans: exact with fixed rates, an upper bound
    with the knee search (its probes stop when two rungs bracket the knee)."""

    total: int
    upper_bound: bool = False

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ValueError(f"a bench plans at least one run, got {self.total}")

    @classmethod
    def fixed(cls, rates: int, seeds: int, rows: int) -> RunCount:
        return cls(rates * seeds * rows)

    @classmethod
    def knee_search(cls, max_probes: int, seeds: int, rows: int) -> RunCount:
        """Probes with the first seed, then the knee and the rung past it with the other seeds."""
        return cls((max_probes + 2 * (seeds - 1)) * rows, upper_bound=True)

    def line(self, done: int, elapsed_s: float) -> str:
        """``progress: 4 of 12 runs done in 1 min 12 s, about 2 min 24 s left``."""
        total = max(self.total, done)
        of = f"{'at most ' if self.upper_bound else ''}{total}"
        head = f"progress: {done} of {of} runs done in {duration_text(elapsed_s)}"
        if done <= 0:
            return head
        left = (total - done) * elapsed_s / done
        return head + (", finished" if total == done else f", about {duration_text(left)} left")

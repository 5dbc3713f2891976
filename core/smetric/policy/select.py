"""Index selection helpers shared by the policies: first minimum and round-robin tie breaking.

Policies score endpoints with plain lists of floats (lower is better, ``inf`` = not a
candidate); these helpers turn a score list into an index without building per-endpoint dicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Two scores closer than this (relative) are a tie: identical loads computed along different
# float paths must not break a tie by rounding noise.
_TIE_REL_TOL = 1e-12


def argmin_first(scores: Sequence[float]) -> int:
    """Index of the first minimum (LMetric's rule). ``scores`` must be non-empty."""
    best_i, best = 0, scores[0]
    for i in range(1, len(scores)):
        if scores[i] < best:
            best_i, best = i, scores[i]
    return best_i


def _tied(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=_TIE_REL_TOL, abs_tol=0.0)


class RoundRobinTies:
    """Breaks ties among equal minima round-robin with a per-instance rotating counter.

    The counter advances only when a tie is actually broken, so a decision without ties never
    perturbs later tie breaks. Each policy instance owns one (no shared state).
    """

    __slots__ = ("_counter",)

    def __init__(self) -> None:
        self._counter = 0

    def argmin(self, scores: Sequence[float]) -> int:
        """Index of a minimum of ``scores`` (non-empty); ties rotate across calls."""
        best_i = argmin_first(scores)
        best = scores[best_i]
        tied = [i for i in range(best_i, len(scores)) if _tied(scores[i], best)]
        if len(tied) == 1:
            return best_i
        pick = tied[self._counter % len(tied)]
        self._counter += 1
        return pick

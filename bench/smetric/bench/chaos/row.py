"""One row of the ``smetric chaos`` table, and the shape of a fault (shared by the fault modules)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from smetric.bench.chaos.stack import ChaosStack


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the chaos table; ``guard`` names the :class:`~smetric.bench.chaos.guards.Guard`
    the row checks (``smetric chaos --guard-off`` must make it fail)."""

    fault: str
    expected: str
    observed: str
    passed: bool
    guard: str


Fault = Callable[[ChaosStack, bool], Awaitable[list[Row]]]


__all__ = ["Fault", "Row"]

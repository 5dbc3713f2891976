"""Fault injection for tests: a dead or slow instance (``--fail-after N`` and ``/admin/fault``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FaultMode = Literal["ok", "dead", "slow"]
FAULT_MODES: tuple[str, ...] = ("ok", "dead", "slow")


@dataclass(slots=True)
class FaultState:
    """Mutable per-instance fault switch (owned by one instance, changed only via its admin API).

    ``dead``: every API route and ``/health`` answer 503, running requests are aborted.
    ``slow``: modelled step times are multiplied by ``slowdown`` (> 1 slows the instance down).
    ``fail_after``: after that many accepted generation requests the instance turns ``dead``
    (0 = never).
    """

    mode: FaultMode = "ok"
    slowdown: float = 1.0
    fail_after: int = 0
    accepted: int = 0

    @property
    def dead(self) -> bool:
        return self.mode == "dead"

    @property
    def time_factor(self) -> float:
        return self.slowdown if self.mode == "slow" else 1.0

    def on_accept(self) -> None:
        self.accepted += 1
        if self.fail_after and self.accepted >= self.fail_after:
            self.mode = "dead"

    def apply(self, body: Any) -> None:
        """Apply ``{"mode": "ok"|"dead"|"slow", "slowdown": float}``; raises ValueError if malformed."""
        if not isinstance(body, dict) or body.get("mode") not in FAULT_MODES:
            raise ValueError(f"expected {{'mode': one of {FAULT_MODES}, 'slowdown': float}}")
        slowdown = body.get("slowdown", self.slowdown if body["mode"] == "slow" else 1.0)
        if not isinstance(slowdown, int | float) or isinstance(slowdown, bool) or not slowdown > 0:
            raise ValueError("slowdown must be a positive number")
        self.mode = body["mode"]
        self.slowdown = float(slowdown)
        if self.mode == "ok":
            self.fail_after = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "slowdown": self.slowdown,
            "fail_after": self.fail_after,
            "accepted": self.accepted,
        }

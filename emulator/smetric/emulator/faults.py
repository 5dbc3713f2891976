"""Fault injection for tests: a dead, slow or erroring instance (``--fail-after N`` and
``/admin/fault``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FaultMode = Literal["ok", "dead", "slow", "error"]
FAULT_MODES: tuple[str, ...] = ("ok", "dead", "slow", "error")
# Statuses the ``error`` mode may answer with: what a client of an overloaded or failing vLLM sees.
ERROR_STATUSES: tuple[int, ...] = (400, 429, 500, 503)


@dataclass(slots=True)
class FaultState:
    """Mutable per-instance fault switch (owned by one instance, changed only via its admin API).

    ``dead``: every API route and ``/health`` answer 503, running requests are aborted.
    ``slow``: modelled step times are multiplied by ``slowdown`` (> 1 slows the instance down).
    ``error``: every generation request is answered at once with ``status`` (one of
    :data:`ERROR_STATUSES`) in the API's own error body, with ``retry-after: retry_after_s`` when
    that is > 0; ``/health`` stays 200 (the instance is alive, it refuses work).
    ``fail_after``: after that many accepted generation requests the instance turns ``dead``
    (0 = never).
    """

    mode: FaultMode = "ok"
    slowdown: float = 1.0
    fail_after: int = 0
    accepted: int = 0
    status: int = 500
    retry_after_s: int = 0

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

    @property
    def erroring(self) -> bool:
        return self.mode == "error"

    def apply(self, body: Any) -> None:
        """Apply ``{"mode": "ok"|"dead"|"slow"|"error", "slowdown": float, "status": int,
        "retry_after_s": int}``; raises ValueError if malformed (and then changes nothing)."""
        if not isinstance(body, dict) or body.get("mode") not in FAULT_MODES:
            raise ValueError(f"expected {{'mode': one of {FAULT_MODES}, 'slowdown': float}}")
        slowdown = body.get("slowdown", self.slowdown if body["mode"] == "slow" else 1.0)
        if not isinstance(slowdown, int | float) or isinstance(slowdown, bool) or not slowdown > 0:
            raise ValueError("slowdown must be a positive number")
        status = body.get("status", 500)
        if status not in ERROR_STATUSES or isinstance(status, bool):
            raise ValueError(f"status must be one of {ERROR_STATUSES}")
        retry_after = body.get("retry_after_s", 0)
        if not isinstance(retry_after, int) or isinstance(retry_after, bool) or not 0 <= retry_after <= 3600:
            raise ValueError("retry_after_s must be an integer in 0..3600")
        self.mode = body["mode"]
        self.slowdown = float(slowdown)
        self.status = int(status)
        self.retry_after_s = retry_after
        if self.mode == "ok":
            self.fail_after = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "slowdown": self.slowdown,
            "fail_after": self.fail_after,
            "accepted": self.accepted,
            "status": self.status,
            "retry_after_s": self.retry_after_s,
        }

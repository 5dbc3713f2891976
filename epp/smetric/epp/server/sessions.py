"""The picker's half of the adaptive session budget (``flowControl.sessionMissShare``; the logic is
:class:`smetric.policy.session_budget.SessionBudget`, the simulator's, docs/overload.md 8g).

A request names its session by the configured session headers (``sessionHeaders``); one without a
session is not counted. A request of a session that is not live gets a 429 (reason ``sessions``,
Retry-After) while the budget binds; an admitted one makes its session live, and the endpoint
the decision chose reports what it held of the prompt (GPU or global tier: the prompt less what
it computes), the budget's signal. The map is keyed by the session token's hash (a bounded entry
whatever the header's length) and holds at most ``MAX_SESSIONS`` sessions; a config reload starts
a new one. Same event loop as the decision: no lock.
"""

from __future__ import annotations

from collections.abc import Callable

from smetric.core.views import RequestView
from smetric.epp.server.flow import FlowShed
from smetric.policy.flowcontrol import FlowControlConfig
from smetric.policy.session_budget import SessionBudget


class PickerSessions:
    """Admission by session in front of the flow-control gate (see the module docstring)."""

    __slots__ = ("budget", "clock")

    def __init__(self, budget: SessionBudget, clock: Callable[[], float]) -> None:
        self.budget = budget
        self.clock = clock

    @classmethod
    def from_config(cls, cfg: FlowControlConfig, clock: Callable[[], float]) -> PickerSessions | None:
        """The sessions ``cfg`` asks for (``None``: flow control off or no session setting; the
        picker's config sets only ``sessionMissShare`` of them)."""
        budget = SessionBudget.from_config(cfg) if cfg.enabled else None
        return cls(budget, clock) if budget is not None else None

    def admit(self, request: RequestView) -> None:
        """Raise :class:`FlowShed` (``sessions``) for a request of a new session while the budget
        binds; else make its session live now."""
        if not request.session_id:
            return
        key, now = hash(request.session_id), self.clock()
        if not self.budget.admits(key, now, request.prompt_tokens):
            raise FlowShed(
                "sessions",
                f"the pool has the live sessions it can hold ({len(self.budget)}); a new session waits",
                counted=False,
            )
        self.budget.touch(key, now, request.prompt_tokens)

    def dispatched(self, request: RequestView, uncached_tokens: int) -> None:
        """The decision went through: the chosen endpoint holds the prompt less ``uncached_tokens``."""
        if request.session_id:
            n = request.prompt_tokens
            self.budget.dispatched(hash(request.session_id), n - min(n, max(0, uncached_tokens)), n)

    def finished(self, session_token: str | None) -> None:
        """A request of ``session_token`` is over: a finished turn keeps its session live."""
        if session_token:
            self.budget.finished(hash(session_token), self.clock())

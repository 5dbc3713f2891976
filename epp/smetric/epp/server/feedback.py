"""The picker's side of the feedback hooks (:class:`~smetric.epp.server.hooks.ResponseHooks`): a
mixin of :class:`~smetric.epp.server.decide.Picker`.

What a response tells the picker changes only what the picker owns: the dispatch ledger (released
at the first byte), the online prefill-rate estimate (a 200 streaming response's TTFT, with the
engine's reported cached share), passive outlier detection (the status of each endpoint tried), the
Responses follow-up map and the live sessions (``flowControl.sessionMissShare``); each hook answers
with the values the servicer exports as metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smetric.epp.parse.usage import Usage
from smetric.epp.server.affinity import ResponseAffinity
from smetric.epp.server.outlier import OutlierDetector, is_error_status
from smetric.epp.server.sessions import PickerSessions
from smetric.router import RouterCore

if TYPE_CHECKING:
    from smetric.epp.server.decide import Pick

_NONE: tuple[str, ...] = ()


class PickerFeedback:
    """Needs the picker's ``core`` (ledger, rates, cost model), ``outliers``, ``responses`` and
    ``sessions``."""

    core: RouterCore
    outliers: OutlierDetector | None
    responses: ResponseAffinity | None
    sessions: PickerSessions | None

    def on_session_end(self, session_token: str | None) -> None:
        if self.sessions is not None:
            self.sessions.finished(session_token)

    def on_prefill_done(self, pick: Pick, request_id: str) -> float | None:
        ledger = self.core.ledger
        if ledger.remove(request_id) is None:
            return None
        return ledger.queued_cost_s(pick.ledger_address)

    def on_complete(self, pick: Pick, ttft_s: float, usage: Usage | None, prompt_known: bool) -> float | None:
        rates = self.core.rates
        if rates.observe(pick.ledger_address, self._observed_cost(pick, usage, prompt_known), ttft_s):
            return rates.speed(pick.ledger_address)
        return None

    def on_response(
        self, pick: Pick, status: int, served: str = "", attempts: int = 0, retry_after_s: float = 0.0
    ) -> tuple[str, ...]:
        """The response's status reached the picker: the endpoints of ``pick``'s list that failed
        before the one that answered (``served`` when the gateway reports it, else the
        ``attempts``-th entry) count an error each, the one that answered its status. Returns the
        endpoints this response ejected (usually none)."""
        o = self.outliers
        if o is None or status <= 0:
            return _NONE
        dest, fallbacks = pick.destination, pick.fallbacks
        if served and served != dest and served in fallbacks:
            n = fallbacks.index(served) + 2
        elif attempts > 1:
            n = attempts
        else:
            n = 1
        ejected = _NONE
        if n > 1:
            for a in (dest, *fallbacks[: n - 2]):
                if o.failed(a):
                    ejected = (*ejected, a)
        answered = served or (dest if n == 1 else fallbacks[n - 2] if n - 2 < len(fallbacks) else "")
        if not answered:  # past the picker's list: the gateway's own fallback answered
            return ejected
        if is_error_status(status):
            if o.failed(answered, retry_after_s):
                ejected = (*ejected, answered)
        else:
            o.succeeded(answered)
        for a in ejected:
            # an engine that answers errors has changed (overloaded, restarting, broken): its learned
            # prefill speed no longer describes it, and a stale low one would keep it from being
            # picked, and so probed, when its ejection ends; it is scored at the pool's prior
            self.core.rates.forget(a)
        return ejected

    def queued_cost_s(self, address: str) -> float:
        return self.core.ledger.queued_cost_s(address)

    def on_endpoint_removed(self, address: str) -> None:
        self.core.rates.forget(address)
        if self.responses is not None:  # its stored responses went with it
            self.responses.forget_endpoint(address)
        if self.outliers is not None:
            self.outliers.forget(address)

    def on_response_id(self, response_id: str, served: str) -> None:
        if self.responses is not None:
            self.responses.remember(response_id, served)

    def _observed_cost(self, pick: Pick, usage: Usage | None, prompt_known: bool) -> float:
        """Cost of the prefill as it happened, in the units the decision used (chars/4 tokens, or
        the index's tokens), so the learned speed converts the picker's own cost estimates; the
        engine's reported cached share (``cached_tokens / prompt_tokens``) replaces the estimated
        hit when known."""
        if not prompt_known or pick.prompt_tokens <= 0:
            return pick.cost_s
        if usage is not None and usage.prompt_tokens and usage.cached_tokens is not None:
            L = pick.prompt_tokens
            uncached = L * (1.0 - min(usage.cached_tokens, usage.prompt_tokens) / usage.prompt_tokens)
            return self.core.cost_model.cost(uncached, L)
        return pick.cost_s

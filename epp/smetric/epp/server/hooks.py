"""The picker's feedback hooks: what the servicer tells it about a routed request's response.

Like the upstream endpoint picker's post-response plugins, the servicer's ext_proc state machine
only reports events; the picker (:class:`smetric.epp.server.decide.Picker`) owns what they change
-- the dispatch ledger, the online prefill-rate estimate -- and answers with the values the
servicer exports as metrics. The servicer never touches the ledger, the rate estimate or the cost
model itself.

Order per request: :meth:`~ResponseHooks.on_response` (the response headers: status and attempts),
:meth:`~ResponseHooks.on_prefill_done` (first response byte; also called,
idempotently, when the response ends or the stream goes away without one), then at most one
:meth:`~ResponseHooks.on_complete` (a 200 streaming response that ended with a first byte).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from smetric.epp.parse.usage import Usage
    from smetric.epp.server.decide import Pick


class ResponseHooks(Protocol):
    def on_prefill_done(self, pick: Pick, request_id: str) -> float | None:
        """The engine's prefill of ``request_id`` is over: release its dispatch-ledger entry.
        Returns the prefill seconds still queued at ``pick.ledger_address`` after the release, or
        ``None`` when no entry was held (already released)."""
        ...

    def on_complete(self, pick: Pick, ttft_s: float, usage: Usage | None, prompt_known: bool) -> float | None:
        """A 200 streaming response ended: its TTFT (and the engine's reported cached share, when
        ``usage`` has it and ``prompt_known``: the decision saw a body) feeds the endpoint's
        prefill-rate estimate. Returns the endpoint's new speed when the sample was taken."""
        ...

    def on_response(
        self, pick: Pick, status: int, served: str = "", attempts: int = 0, retry_after_s: float = 0.0
    ) -> tuple[str, ...]:
        """The response's status: an error (5xx, 429) counts against the endpoint that answered,
        and each endpoint of the picker's list tried before it (``served``: the gateway's reported
        endpoint, ``attempts``: its attempt count, 0 when not told) counts a failed attempt; a
        success readmits a probed endpoint. Returns the endpoints ejected by it."""
        ...

    def on_session_end(self, session_token: str | None) -> None:
        """A routed request of ``session_token`` (``None``: none named) is over, however it ended: a
        finished turn keeps its session live (the adaptive session budget, ``sessionMissShare``)."""
        ...

    def queued_cost_s(self, address: str) -> float:
        """Prefill seconds the ledger holds for ``address`` (the queued-prefill gauge)."""
        ...

    def on_endpoint_removed(self, address: str) -> None:
        """Discovery dropped ``address``: its learned speed goes (a pod coming back starts afresh),
        and so do the Responses follow-up entries of the responses it held."""
        ...

    def on_response_id(self, response_id: str, served: str) -> None:
        """A 200 Responses answer of ``served`` carries ``response_id``: follow-ups naming it as
        ``previous_response_id`` go there (:mod:`smetric.epp.server.affinity`)."""
        ...

"""What the request path refuses or bounds before any decision (hostile input).

* :data:`INFERENCE_PATHS`: the API paths the gateway forwards (everything else is 404 at the
  gateway's Lua filter and again at the picker): an engine's ``/metrics``, ``/reset_prefix_cache``
  or admin routes are never reachable through the gateway.
* :data:`TRUSTED_HEADERS`: routing headers only the picker (or the gateway) may set. A client's copy
  is removed by the gateway before ext_proc runs (``envoy/bootstrap.py``) and again by the picker's
  header mutation, so a client can neither choose its endpoint nor reach a prefill pod of its choice.
* :data:`PICKER_ID_HEADER`: the picker's own request id. The dispatch ledger and the response
  observer are keyed on it, never on the client's ``x-request-id`` (a reused client id would
  overwrite another request's ledger entry).
* :class:`BodyBudget`: one process-wide budget for buffered request bodies. ``--max-body-bytes``
  bounds one request; the budget bounds their sum, so N concurrent large bodies get a 503 with a
  clear message instead of growing the picker's memory N-fold.
* :class:`Admission`: load shedding for an alive but overloaded picker. Envoy runs no message
  timeout in FULL_DUPLEX_STREAMED, so the picker bounds itself: at most ``max_inflight`` requests
  between "body complete" and "routed", and each gets at most ``budget_s`` from its headers to
  its decision (upload included). Past either bound the request gets 503 with ``retry-after`` at
  once (:class:`Shed`). A request still uploading is not counted: slow or stalled uploads cannot
  fill the limit and shed the complete requests behind them; the budget and the gateway's
  request timeouts and connection limit bound them.
"""

from __future__ import annotations

import threading

from smetric.epp.parse.errors import RequestError

PICKER_ID_HEADER = "x-smetric-request-id"

# OpenAI (chat, completions, Responses, embeddings, models), Anthropic Messages; query strings are
# ignored. Source: the OpenAI and Anthropic API references, vLLM's OpenAI server routes.
INFERENCE_PATHS: tuple[str, ...] = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/embeddings",
    "/v1/models",
)

# Paths whose body is a prompt but whose answer computes nothing on the engine's KV cache (Claude
# Code asks for a token count before it sends a turn; vLLM 0.32 serves it in
# vllm/entrypoints/anthropic/api_router.py): routed by load, without a prefill charge, a session
# step or a prefix-index entry.
NO_PREFILL_PATHS: tuple[str, ...] = ("/v1/messages/count_tokens",)


def prefills(path: str) -> bool:
    """Whether a request to ``path`` (query string ignored) makes the engine prefill its prompt."""
    return path.split("?", 1)[0].rstrip("/") not in NO_PREFILL_PATHS


TRUSTED_HEADERS: tuple[str, ...] = (
    "x-gateway-destination-endpoint",
    "x-gateway-destination-endpoint-served",
    "x-gateway-destination-endpoint-subset",
    "x-smetric-destination-primary",
    "x-prefiller-host-port",
    "x-envoy-original-dst-host",
    PICKER_ID_HEADER,
)


def path_allowed(path: str, allowed: tuple[str, ...] = INFERENCE_PATHS) -> bool:
    """``True`` when ``path`` (query string ignored, one trailing slash tolerated) is allowed;
    an empty allow-list allows everything."""
    if not allowed:
        return True
    route = path.split("?", 1)[0]
    if len(route) > 1 and route.endswith("/"):
        route = route[:-1]
    return route in allowed


class BodyBudget:
    """Bytes of request bodies buffered by all streams together, capped at ``limit_bytes``.

    ``take`` reserves (``False`` when it would pass the cap: nothing is reserved), ``give`` returns.
    Thread-safe (parsing runs on a worker thread), though the servicer only calls it on the loop."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes <= 0:
            raise ValueError("limit_bytes must be positive")
        self.limit_bytes = limit_bytes
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    def take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit_bytes:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used = max(0, self._used - n)


SHED_RETRY_AFTER_S = 1  # the retry-after of a shed request: a client retries after one second


class Shed(RequestError):
    """A request refused by admission control (503 + ``retry-after``); ``reason`` labels the
    ``smetric_epp_shed_total`` counter: ``inflight`` (too many undecided requests) or ``deadline``
    (no decision within the budget)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(503, message)
        self.reason = reason


class Admission:
    """Undecided requests in flight, capped at ``max_inflight``; the per-decision time budget.

    ``enter`` admits one request (raises :class:`Shed` when full), ``leave`` ends its undecided
    phase (routed, refused or gone); ``check(started_at, now)`` raises :class:`Shed` when the
    budget is spent. Only called on the event loop (no lock)."""

    def __init__(self, max_inflight: int, budget_s: float) -> None:
        if max_inflight <= 0 or not budget_s > 0:
            raise ValueError(
                "admission control needs a positive --max-inflight-decisions and --decision-budget-ms, "
                f"got {max_inflight} and {budget_s * 1000:g} ms"
            )
        self.max_inflight = max_inflight
        self.budget_s = budget_s
        self.inflight = 0

    def enter(self) -> None:
        if self.inflight >= self.max_inflight:
            raise Shed(
                "inflight",
                f"the endpoint picker is overloaded: {self.inflight} requests are waiting for a "
                f"routing decision (limit {self.max_inflight}); retry after {SHED_RETRY_AFTER_S} s",
            )
        self.inflight += 1

    def leave(self) -> None:
        self.inflight = max(0, self.inflight - 1)

    def check(self, started_at: float, now: float) -> None:
        if now - started_at > self.budget_s:
            raise self.late(now - started_at)

    def late(self, waited_s: float) -> Shed:
        return Shed(
            "deadline",
            f"the endpoint picker could not route the request within its decision budget of "
            f"{self.budget_s:g} s (waited {waited_s:.2f} s since the request headers arrived): it is "
            f"overloaded or the request body is arriving too slowly; retry after {SHED_RETRY_AFTER_S} s",
        )

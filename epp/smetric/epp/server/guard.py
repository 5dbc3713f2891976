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
  clear message instead of growing the picker's memory N-fold. Large bodies (over 1 MiB) share at
  most 3/4 of it and one connection at most one body at the size limit, so clients re-sending
  maximal uploads never leave the normal requests without room.
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


# A body past this many bytes is "large": normal requests (chat turns, an agent's 100k-token
# history: ~400 kB of JSON) stay below it, images and long transcripts pass it.
LARGE_BODY_BYTES = 1 << 20
# Large bodies together may hold at most this share of the budget; the rest stays free for the
# bodies below LARGE_BODY_BYTES. 3/4 of the default 64 MiB is 48 MiB: three bodies at the 16 MiB
# limit at once, and 16 MiB (forty 400 kB requests) the large ones can never take.
LARGE_SHARE = 0.75


class BodyBudget:
    """Bytes of request bodies buffered by all streams together, capped at ``limit_bytes``, shared
    so that large bodies cannot crowd out small ones:

    * every body counts against ``limit_bytes``;
    * once a body passes ``large_bytes`` its whole reservation counts as large: large bodies
      together hold at most ``large_limit_bytes`` (:data:`LARGE_SHARE` of the budget), so small
      bodies always have ``limit_bytes - large_limit_bytes``;
    * one client connection (Envoy's ``connection.id`` attribute, which the client cannot choose)
      holds at most ``client_large_bytes`` of large bodies (one body at the size limit); without
      it (a gateway that sends none) only the shared caps apply.

    ``take`` reserves (``False`` when a cap would be passed: nothing is reserved; ``refusal``
    says which), ``give`` returns a stream's whole reservation. Thread-safe, though the servicer
    only calls it on the loop."""

    def __init__(
        self,
        limit_bytes: int,
        *,
        large_bytes: int = LARGE_BODY_BYTES,
        large_share: float = LARGE_SHARE,
        client_large_bytes: int | None = None,
    ) -> None:
        """``client_large_bytes``: default the large share (no per-client bound below it)."""
        if limit_bytes <= 0:
            raise ValueError("limit_bytes must be positive")
        if not 0.0 < large_share <= 1.0 or large_bytes <= 0:
            raise ValueError("large_share must be in (0, 1] and large_bytes positive")
        self.limit_bytes = limit_bytes
        self.large_bytes = large_bytes
        self.large_limit_bytes = int(limit_bytes * large_share)
        self.client_large_bytes = min(client_large_bytes or self.large_limit_bytes, self.large_limit_bytes)
        self._used = 0
        self._large = 0
        self._by_client: dict[str, int] = {}  # large bytes per client; at most one entry per large body
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def large_used_bytes(self) -> int:
        return self._large

    def take(self, n: int, held: int = 0, client: str = "") -> bool:
        """Reserve ``n`` more bytes for a body that holds ``held``; ``False`` (nothing reserved)
        when a cap would be passed (:meth:`refusal` says which)."""
        with self._lock:
            if self._refusal(n, held, client):
                return False
            grow = self._large_growth(n, held)
            if grow:
                self._large += grow
                if client:
                    self._by_client[client] = self._by_client.get(client, 0) + grow
            self._used += n
            return True

    def refusal(self, n: int, held: int = 0, client: str = "") -> str:
        """Why ``take(n, held, client)`` would be refused now ("" when it would not)."""
        with self._lock:
            return self._refusal(n, held, client)

    def _large_growth(self, n: int, held: int) -> int:
        """Large bytes a take adds: none below the threshold, the whole body when it passes it."""
        after = held + n
        if after <= self.large_bytes:
            return 0
        return n if held > self.large_bytes else after

    def _refusal(self, n: int, held: int, client: str) -> str:
        if self._used + n > self.limit_bytes:
            return f"it buffers {self._used} bytes of request bodies, its budget is {self.limit_bytes}"
        grow = self._large_growth(n, held)
        if not grow:
            return ""
        if self._large + grow > self.large_limit_bytes:
            return (
                f"bodies over {self.large_bytes} bytes hold {self._large} bytes, their share of its "
                f"budget is {self.large_limit_bytes}"
            )
        if client and self._by_client.get(client, 0) + grow > self.client_large_bytes:
            return (
                f"this connection's bodies over {self.large_bytes} bytes would pass "
                f"{self.client_large_bytes} bytes, its budget is per connection"
            )
        return ""

    def give(self, held: int, client: str = "") -> None:
        """Return a stream's whole reservation of ``held`` bytes."""
        with self._lock:
            self._used = max(0, self._used - held)
            if held > self.large_bytes:
                self._large = max(0, self._large - held)
                if client in self._by_client:
                    left = self._by_client.pop(client) - held
                    if left > 0:
                        self._by_client[client] = left


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

"""The response path of the ext_proc servicer (a mixin of :class:`~smetric.epp.server.servicer.ExtProcServicer`).

Response headers, body chunks and trailers pass through unchanged; the status, the first token
(TTFT of a streaming response: its first chunk with more than opening events), the time per output
token after it (TPOT, from the usage's completion tokens) and the usage are reported to the
picker's feedback hooks
(:class:`~smetric.epp.server.hooks.ResponseHooks`). With ``--response-path observer`` the same
methods run on a second, ``observability_mode`` stream, matched to its decision by
:class:`~smetric.epp.server.observer.ObserverMatcher`. A bug here is logged and the data passed
through: the response path never refuses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import API_RESPONSES
from smetric.epp.parse.usage import UsageReader, carries_output
from smetric.epp.server import messages as msgs
from smetric.epp.server.affinity import HEAD_BYTES, response_id_in
from smetric.epp.server.flow import FlowQueue
from smetric.epp.server.hooks import ResponseHooks
from smetric.epp.server.observer import ObserverMatcher
from smetric.epp.server.stream import StreamState

log = logging.getLogger("smetric.epp")

Responses = Sequence[ep.ProcessingResponse]
# Envoy's attempt count in the response (route ``include_attempt_count_in_response``): attempt n
# was answered by the n-th entry of the picker's list (override_host and the ORIGINAL_DST composite
# cluster both walk it in order), so the n - 1 entries before it failed.
ATTEMPT_COUNT_HEADER = "x-envoy-attempt-count"
MAX_HEADER_INT = 86_400  # a larger attempt count or Retry-After is read as this


def _int_header(value: str) -> int:
    """A non-negative integer header (delta-seconds ``Retry-After``, an attempt count); 0 when
    absent or not a plain integer (an HTTP-date ``Retry-After`` is not honoured)."""
    v = value.strip()
    if not (v.isascii() and v.isdigit()):
        return 0
    return MAX_HEADER_INT if len(v) > 9 else min(int(v), MAX_HEADER_INT)


RESPONSE_KINDS = frozenset(("response_headers", "response_body", "response_trailers"))


class ObserverSettings(Protocol):
    @property
    def response_observer(self) -> bool: ...
    @property
    def observer_attach_timeout_s(self) -> float: ...


class ResponsePath:
    """Needs the servicer's ``metrics``, ``hooks``, ``observers``, ``clock`` and the settings'
    ``response_observer`` / ``observer_attach_timeout_s``."""

    metrics: PickerMetrics
    hooks: ResponseHooks
    observers: ObserverMatcher
    clock: Callable[[], float]
    settings: ObserverSettings
    flow: FlowQueue | None  # flow control: told when capacity frees

    def _response(self, st: StreamState, m: ep.ProcessingRequest, kind: str) -> Responses:
        """Response path: never refuse; on a bug log it and pass the data through unchanged."""
        t0 = time.perf_counter()
        try:
            if kind == "response_body":
                return self._response_body(st, m.response_body)
            if kind == "response_headers":
                if m.HasField("metadata_context"):
                    st.served = msgs.served_endpoint(m.metadata_context)
                return self._response_headers(st, m.response_headers)
            self._complete(st)
        except Exception:
            log.exception("response-path error on request %s (passed through)", st.request_id)
            if kind == "response_body":
                if st.resp_mode == msgs.MODE_FULL_DUPLEX:
                    return msgs.streamed_chunks(
                        m.response_body.body, m.response_body.end_of_stream, response=True
                    )
                return (msgs.CONTINUE_RESPONSE_BODY,)
            if kind == "response_headers":
                return (msgs.CONTINUE_RESPONSE_HEADERS,)
        finally:  # llm_d_epp_response_processing_duration_seconds: the picker's time on the message
            self.metrics.llmd.handler_time(st.ledger_id, time.perf_counter() - t0)
        return (msgs.CONTINUE_RESPONSE_TRAILERS,)

    def _response_headers(self, st: StreamState, part: ep.HttpHeaders) -> Responses:
        raw = msgs.header_map(part.headers)
        try:
            st.resp_status = int(raw.get(":status", "0"))
        except ValueError:
            st.resp_status = 0
        st.resp_sse = raw.get("content-type", "").startswith("text/event-stream")
        st.usage = UsageReader(st.resp_sse)
        # upstream's modelServerStreaming: the request asked for a stream, or the answer is one
        streaming = st.resp_sse or (st.parsed is not None and st.parsed.stream)
        self.metrics.llmd.response_headers(st.ledger_id, st.resp_status, streaming, self.clock())
        if st.resp_status == 200 and st.parsed is not None and st.parsed.api == API_RESPONSES:
            st.resp_head = bytearray()  # its response id: a follow-up's previous_response_id
        if st.pick is not None:
            if st.resp_status != 200:
                # the endpoint Envoy reports, when it is one the picker named (a label never takes a
                # value from outside the pool)
                served = (
                    st.served
                    if st.served in (st.pick.destination, *st.pick.fallbacks)
                    else st.pick.destination
                )
                self.metrics.endpoint_error(served, st.resp_status)
            self._outcome(st, raw)
        if not st.resp_sse:  # a JSON answer comes after the whole generation: prefill is long done
            self._prefill_done(st)
        if part.end_of_stream:
            self._complete(st)
        return (msgs.CONTINUE_RESPONSE_HEADERS,)

    def _outcome(self, st: StreamState, raw: dict[str, str]) -> None:
        """The status, the gateway's attempt count and ``Retry-After`` go to the picker's outlier
        detection (:meth:`~smetric.epp.server.hooks.ResponseHooks.on_response`)."""
        assert st.pick is not None
        attempts = _int_header(raw.get(ATTEMPT_COUNT_HEADER, ""))
        st.retried = attempts > 1 or bool(st.served and st.served != st.pick.destination)
        ejected = self.hooks.on_response(
            st.pick, st.resp_status, st.served, attempts, _int_header(raw.get("retry-after", ""))
        )
        for address in ejected:
            self.metrics.endpoint_ejections.labels(endpoint=address).inc()
            log.warning("endpoint %s ejected from routing: errors or failed attempts in a row", address)

    def _response_body(self, st: StreamState, part: ep.HttpBody) -> Responses:
        st.resp_bytes += len(part.body)
        self.metrics.llmd.response_chunk(st.ledger_id, len(part.body), self.clock())
        # The first token: the first chunk, or for a stream the first with more than opening events.
        if st.first_byte_at is None and (not st.resp_sse or carries_output(part.body)):
            st.first_byte_at = self.clock()
            self._prefill_done(st)
        if st.usage is not None:
            st.usage.feed(part.body)
        if st.resp_head is not None:
            self._response_id(st, part.body)
        if part.end_of_stream:
            self._complete(st)
        if st.resp_mode == msgs.MODE_FULL_DUPLEX:
            return msgs.streamed_chunks(part.body, part.end_of_stream, response=True)
        return (msgs.CONTINUE_RESPONSE_BODY,)

    def _response_id(self, st: StreamState, chunk: bytes) -> None:
        """Look for the response id in the answer's first HEAD_BYTES bytes (then stop looking)."""
        head = st.resp_head
        assert head is not None
        head += chunk[: HEAD_BYTES - len(head)]
        found = response_id_in(bytes(head))
        if found and st.pick is not None:
            self.hooks.on_response_id(found, st.served or st.pick.destination)
        if found or len(head) >= HEAD_BYTES:
            st.resp_head = None

    def _prefill_done(self, st: StreamState) -> None:
        if st.pick is None:
            return
        left_s = self.hooks.on_prefill_done(st.pick, st.request_id)
        if self.flow is not None:
            self.flow.kick()
        if left_s is not None:
            self.metrics.endpoint_queued_prefill.labels(endpoint=st.pick.ledger_address).set(left_s)

    def _queued_gauge(self, address: str) -> None:
        self.metrics.endpoint_queued_prefill.labels(endpoint=address).set(self.hooks.queued_cost_s(address))

    def _complete(self, st: StreamState) -> None:
        """The response ended: usage and the TTFT sample feed the metrics and the picker's hook."""
        if st.completed:
            return
        st.completed = True
        self._prefill_done(st)
        pick = st.pick
        usage = st.usage.result() if st.usage is not None else None
        if usage is not None:
            m = self.metrics.usage_tokens
            for kind, value in (
                ("prompt", usage.prompt_tokens),
                ("completion", usage.completion_tokens),
                ("cached", usage.cached_tokens),
            ):
                if value:
                    m.labels(kind=kind).inc(value)
        if pick is not None:
            prompt = (usage.prompt_tokens or 0) if usage is not None else 0
            completion = (usage.completion_tokens or 0) if usage is not None else 0
            now = self.clock()
            self.metrics.upstream.finished(
                st.ledger_id,
                st.resp_status,
                now - st.dispatched_at,
                prompt,
                completion,
                ttft_s=st.first_byte_at - st.dispatched_at if st.resp_sse and st.first_byte_at else None,
                cached_tokens=(usage.cached_tokens or 0) if usage is not None else 0,
                response_bytes=st.resp_bytes,
            )
            cached = usage.cached_tokens if usage is not None else None
            self.metrics.llmd.finished(st.ledger_id, now, True, prompt, completion, cached)
        if pick is None or st.first_byte_at is None or not st.resp_sse or st.resp_status != 200:
            return
        ttft_s = st.first_byte_at - st.dispatched_at
        self.metrics.ttft.observe(ttft_s)
        if usage is not None and usage.completion_tokens is not None and usage.completion_tokens > 1:
            # The stream just ended (its last chunk or trailers): now is its last token's time.
            tpot_s = (self.clock() - st.first_byte_at) / (usage.completion_tokens - 1)
            self.metrics.tpot.observe(tpot_s)
        # Answered after a failed attempt (possibly by a fallback): its TTFT holds the failed attempt
        # and measures another endpoint, so it teaches no endpoint's prefill speed. A wrong low
        # speed would keep the destination from being picked, and so from ever being re-learned.
        speed = (
            None
            if st.retried
            else self.hooks.on_complete(pick, ttft_s, usage, prompt_known=st.parsed is not None)
        )
        if self.flow is not None:
            self.flow.kick()
        if speed is not None:
            self.metrics.endpoint_prefill_speed.labels(endpoint=pick.ledger_address).set(speed)

    def _finish(self, st: StreamState) -> None:
        """Routing stream over (normally, on error or cancel): the ledger entry must not outlive it,
        unless a response observer reports (or is about to report) this request's response."""
        if st.pick is None:
            return
        if self.settings.response_observer and not st.completed:
            self.observers.wait(st, self.settings.observer_attach_timeout_s, self._observer_missing)
            return
        self._settle(st)

    def _settle(self, st: StreamState) -> None:
        """The response is over (or will not be reported): usage, TTFT sample, ledger entry."""
        if st.first_byte_at is not None or st.resp_status:
            self._complete(st)
        self._prefill_done(st)
        self.hooks.on_session_end(st.headers.session_token if st.headers is not None else None)
        self.metrics.upstream.finished(st.ledger_id, st.resp_status, None, 0, 0)  # no response: not running
        self.metrics.llmd.finished(st.ledger_id, self.clock(), False)
        self.observers.done(st)

    # -- response observer (--response-path=observer) --------------------------------------------

    async def _observe(self, first: ep.ProcessingRequest, rest: AsyncIterator[ep.ProcessingRequest]) -> None:
        st = self.observers.attach(first, self.settings.response_observer)
        try:
            if st is None:
                async for _ in rest:  # nothing to report to: let Envoy finish the stream
                    pass
                return
            async for m in rest:
                kind = m.WhichOneof("request")
                if kind in RESPONSE_KINDS:
                    self._response(st, m, kind)  # replies are not sent: Envoy ignores them here
                    if st.completed:  # end the RPC now: Envoy would hold it deferred_close_timeout
                        return
        finally:
            if st is not None:
                self._settle(st)

    def _observer_missing(self, st: StreamState) -> None:
        if self.observers.missing(st, self.settings.observer_attach_timeout_s):
            self._settle(st)

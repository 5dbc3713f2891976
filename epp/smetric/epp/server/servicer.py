"""The ``envoy.service.ext_proc.v3.ExternalProcessor`` servicer (grpc.aio).

Request path: headers -> body (FULL_DUPLEX_STREAMED chunks, or one BUFFERED message) -> parse ->
:class:`~smetric.epp.server.decide.Picker` -> routing reply (deferred HeadersResponse + streamed
body echo, or BodyResponse with the header mutation) or an ImmediateResponse for a request the
picker refuses. Response path: headers, body and trailers pass through unchanged; the status, the
first body chunk (TTFT of a streaming response) and the usage are reported to the picker's feedback
hooks (:class:`~smetric.epp.server.hooks.ResponseHooks`: dispatch ledger, online prefill-rate
estimate), which answer with the values exported as metrics (that half lives in
:mod:`~smetric.epp.server.response_path`; admission control and body buffering before the
decision live in :mod:`~smetric.epp.server.intake`). A bad request ends only its own
stream: any exception becomes a 500 ImmediateResponse on the request path, and is logged and
ignored on the response path.

Response path ``observer`` (``ServicerSettings.response_observer``, flag ``--response-path``): the
response comes on a second, ``observability_mode`` stream, matched to its decision by
:class:`~smetric.epp.server.observer.ObserverMatcher`; the same response path then runs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import replace

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from smetric.core.views import RequestView
from smetric.epp.contracts import PromptKey
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import ParsedBody, parse_body
from smetric.epp.parse.errors import RequestError
from smetric.epp.parse.headers import HDR_REQUEST_ID, RequestHeaders, parse_headers
from smetric.epp.server import messages as msgs
from smetric.epp.server.affinity import PEER_ASK_TIMEOUT_S, AskPeers
from smetric.epp.server.decide import Pick, Picker
from smetric.epp.server.flow import FlowMetrics, FlowQueue, FlowShed, Held
from smetric.epp.server.guard import (
    PICKER_ID_HEADER,
    TRUSTED_HEADERS,
    Admission,
    BodyBudget,
    Shed,
    path_allowed,
    prefills,
)
from smetric.epp.server.hooks import ResponseHooks
from smetric.epp.server.intake import RequestIntake
from smetric.epp.server.keyrecipe import KeyRecipe
from smetric.epp.server.observer import ObserverMatcher
from smetric.epp.server.offload import ParseOffload
from smetric.epp.server.response_path import RESPONSE_KINDS, ResponsePath
from smetric.epp.server.servicer_settings import ChatRenderer, ServicerSettings
from smetric.epp.server.stream import StreamState

log = logging.getLogger("smetric.epp")
decision_log = logging.getLogger("smetric.epp.decisions")  # one line per decision, off by default

Responses = Sequence[ep.ProcessingResponse]
_NOTHING: Responses = ()


class ExtProcServicer(RequestIntake, ResponsePath, ep_grpc.ExternalProcessorServicer):
    settings: ServicerSettings

    def __init__(
        self,
        picker: Picker,
        metrics: PickerMetrics,
        settings: ServicerSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        renderer: ChatRenderer | None = None,
        key_recipe: KeyRecipe | None = None,
    ) -> None:
        """``renderer``: the engines' chat template (a precise prefix index must see the prompt text
        the engine tokenizes); without it the index gets the role-marked text of :mod:`parse.body`.
        ``key_recipe``: how a worker process keys as ``picker`` and ``renderer`` do (large bodies are
        parsed in ``settings.parse_processes`` processes with it, else on threads)."""
        self.picker = picker
        self.hooks: ResponseHooks = picker  # all the response path tells the picker goes through these
        self.renderer = renderer
        self.metrics = metrics
        self.settings = settings if settings is not None else ServicerSettings()
        self.clock = clock
        self.observers = ObserverMatcher(metrics)  # --response-path=observer
        gate = getattr(picker, "flow_gate", None)
        self.flow: FlowQueue | None = (
            None if gate is None else FlowQueue(gate.config, FlowMetrics(metrics.registry), clock)
        )
        # one body at the size limit per connection; large bodies share 3/4 of the budget
        self.budget = BodyBudget(
            self.settings.body_budget_bytes, client_large_bytes=self.settings.max_body_bytes
        )
        self.offload = ParseOffload(self.settings.parse_workers, key_recipe, self.settings.parse_processes)
        self.admission = Admission(self.settings.max_inflight_decisions, self.settings.decision_budget_s)
        # --peers: where a follow-up's previous response lives, asked of the other replicas
        # (snapshot.StateKeeper.ask_peers) when this one has not heard of it
        self.peer_lookup: Callable[[str], Awaitable[str | None]] | None = None
        self._endpoint_names(picker)

    def _endpoint_names(self, picker: Picker) -> None:
        """The metrics' endpoint labels name discovery's pods (``llm_d_epp_scheduler_attempts_total``)."""
        source = getattr(picker, "source", None)
        if source is not None:
            self.metrics.llmd.names_from(source.ready_endpoints)

    def use_picker(
        self, picker: Picker, served_models: Iterable[str], session_headers: Sequence[str] | None = None
    ) -> None:
        """A reloaded config: new requests go to ``picker`` (built with the running one's ledger,
        so the requests in flight finish in it), its ``servedModels`` and ``sessionHeaders``."""
        self.picker = picker
        self.hooks = picker
        self._endpoint_names(picker)
        headers = self.settings.session_headers if session_headers is None else tuple(session_headers)
        self.settings = replace(
            self.settings, served_models=frozenset(served_models), session_headers=headers
        )
        gate = getattr(picker, "flow_gate", None)
        if gate is not None:  # flow control on in the new config: its queue bounds, from now on
            if self.flow is None:
                self.flow = FlowQueue(gate.config, FlowMetrics(self.metrics.registry), self.clock)
            else:
                self.flow.reconfigure(gate.config)
        # (off in the new config: the new picker holds nothing; the queue drains what it holds)

    async def Process(
        self, request_iterator: AsyncIterator[ep.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ep.ProcessingResponse]:
        st = StreamState()
        self.metrics.active_streams.inc()
        self.metrics.llmd.stream_opened()
        opened_at, code = self.clock(), "OK"
        messages = request_iterator.__aiter__()
        try:
            while True:
                closed = False
                try:
                    if st.admitted_at is None:
                        message = await anext(messages)
                    else:  # undecided: the next message and its parsing within the decision budget
                        message = await self._within_budget(st, messages)
                    if message.observability_mode:  # a response observer: it gets no replies
                        await self._observe(message, messages)
                        return
                    try:
                        out = self.handle(st, message)
                    except AskPeers as ask:  # a follow-up this replica cannot place yet
                        out = await self._ask_peers(st, ask.response_id)
                    except Held as held:  # flow control: wait, bounded, for an endpoint with capacity
                        out = await self._hold(st, held)
                except StopAsyncIteration:
                    return
                except FlowShed as exc:
                    out, closed = (self._flow_shed(st, exc),), True
                except Shed as exc:
                    out, closed = (self._shed(st, exc),), True
                except RequestError as exc:
                    out, closed = (self._refuse(st, exc.status, exc.message),), True
                except Exception:
                    log.exception("internal error on request %s", st.request_id)
                    out, closed = (self._refuse(st, 500, "internal error in the endpoint picker"),), True
                for response in out:
                    yield response
                if closed:
                    return
        except (asyncio.CancelledError, GeneratorExit):  # the gateway reset or cancelled the stream
            code = "Canceled"
            raise
        except BaseException:
            code = "Unknown"
            raise
        finally:
            self._leave(st)
            self._drop_body(st)
            self._finish(st)
            self.metrics.active_streams.dec()
            self.metrics.llmd.stream_closed(self.clock() - opened_at, code)

    async def _ask_peers(self, st: StreamState, response_id: str) -> Responses:
        """Ask the peer replicas where ``response_id`` lives (within the decision budget), then
        decide again: pinned when one knew, by the policy otherwise."""
        assert self.peer_lookup is not None and st.resume is not None
        st.asked_peers = True
        bound_s = PEER_ASK_TIMEOUT_S
        if st.admitted_at is not None:
            bound_s = min(bound_s, st.admitted_at + self.admission.budget_s - self.clock())
        found = None
        if bound_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(bound_s):
                    found = await self.peer_lookup(response_id)
        self.metrics.response_peer_asks.labels(outcome="found" if found else "unknown").inc()
        try:
            return st.resume()
        except Held as held:
            return await self._hold(st, held)

    async def _hold(self, st: StreamState, held: Held) -> Responses:
        """Park the stream in the flow-control queue until its decision goes through; the
        decision budget no longer applies (the queue's TTL bounds the wait)."""
        assert self.flow is not None and st.resume is not None
        self._leave(st)
        st.held_since = self.clock()
        h = st.headers
        flow = (h.session_token if h is not None and h.session_token else None) or st.ledger_id
        priority = -1 if h is not None and h.sheddable else 0
        out: Responses = await self.flow.hold(flow, priority, held, st.resume, st.body)
        return out

    def _flow_shed(self, st: StreamState, exc: FlowShed) -> ep.ProcessingResponse:
        assert self.flow is not None
        if not exc.counted:
            self.flow.metrics.shed.labels(reason=exc.reason).inc()
        self.metrics.immediate_responses.labels(code="429").inc()
        self._refused(st, 429)
        log.info("flow control refused request %s: %s", st.request_id, exc)
        # Retry-After is whole seconds (RFC 9110 10.2.3)
        return msgs.immediate(429, str(exc), retry_after_s=math.ceil(self.flow.cfg.retry_after_s))

    def _unknown_here(self, st: StreamState, parsed: ParsedBody) -> bool:
        """A follow-up whose previous response this replica has not heard of, not yet asked."""
        responses = self.picker.responses
        return (
            self.peer_lookup is not None
            and not st.asked_peers
            and st.held_since is None  # a decision re-run by flow control does not wait again
            and responses is not None
            and responses.lookup(parsed.previous_response_id) is None
        )

    def _prompt_text(self, parsed: ParsedBody) -> str:
        """What the prefix index sees: the engines' chat rendering when known, else ours."""
        if self.renderer is not None and parsed.messages:
            return self.renderer.render_chat(parsed.messages)
        return parsed.prompt_text

    def _index_key(self, parsed: ParsedBody) -> tuple[str, PromptKey]:
        text = self._prompt_text(parsed)
        return text, self.picker.prompt_key(text, parsed.token_ids or None)

    def ledger_key(self, headers: RequestHeaders) -> str:
        """The request's key in the dispatch ledger and the observer matcher: the picker's own id.
        A client's ``x-request-id`` is not unique (clients reuse it, on purpose or by retrying), and
        a reused key would overwrite another request's ledger entry and leak its queued work."""
        return uuid.uuid4().hex

    # -- dispatch -------------------------------------------------------------------------------

    def handle(self, st: StreamState, m: ep.ProcessingRequest) -> Responses:
        kind = m.WhichOneof("request")
        if kind == "request_body":
            return self._request_body(st, m.request_body)
        if kind == "request_headers":
            return self._request_headers(st, m)
        if kind == "request_trailers":
            return self._request_trailers(st)
        if kind in RESPONSE_KINDS:
            return self._response(st, m, kind)
        raise RequestError(400, f"unexpected ext_proc message {kind!r}")

    # -- request path ---------------------------------------------------------------------------

    def _request_headers(self, st: StreamState, m: ep.ProcessingRequest) -> Responses:
        st.received_at = self.clock()  # upstream's RequestReceivedTimestamp (a refusal below counts too)
        if m.HasField("protocol_config"):
            st.req_mode = m.protocol_config.request_body_mode
            st.resp_mode = m.protocol_config.response_body_mode
        raw = msgs.header_map(m.request_headers.headers)
        st.headers = parse_headers(raw, self.settings.session_headers)
        st.generated_id = HDR_REQUEST_ID not in raw
        st.client = msgs.downstream_connection(m.attributes)  # "" when the gateway sends none
        st.ledger_id = self.ledger_key(st.headers)
        if not path_allowed(st.headers.path, self.settings.allowed_paths):
            raise RequestError(404, f"path {st.headers.path.split('?', 1)[0]!r} is not an inference API")
        st.admitted_at = self.clock()  # the decision budget runs from here (upload included)
        st.subset = msgs.subset_ips(m.metadata_context) if self.settings.subset_filter else None
        if m.request_headers.end_of_stream or st.req_mode not in (msgs.MODE_FULL_DUPLEX, msgs.MODE_BUFFERED):
            # No body will reach the picker (GET, or a body mode it does not take): route on headers.
            self._admit(st)
            st.resume = lambda: (self._route(st, self._decide(st, None), None),)
            return st.resume()
        if st.req_mode == msgs.MODE_BUFFERED:
            return (msgs.CONTINUE_REQUEST_HEADERS,)
        return _NOTHING  # FULL_DUPLEX_STREAMED: the headers reply waits for the whole body

    def _request_body(self, st: StreamState, b: ep.HttpBody) -> Responses:
        if st.pick is not None:  # routed on headers already: pass the body through
            if st.req_mode == msgs.MODE_FULL_DUPLEX:
                return msgs.streamed_chunks(b.body, b.end_of_stream)
            return (msgs.CONTINUE_REQUEST_BODY,)
        self._absorb(st, b.body)
        if st.req_mode == msgs.MODE_BUFFERED:  # the one buffered message is the whole body
            st.resume = lambda: self._route_buffered(st)
            return st.resume()
        if not b.end_of_stream:
            return _NOTHING
        return self._release(st, end_of_stream=True)

    def _request_trailers(self, st: StreamState) -> Responses:
        if st.pick is not None or st.req_mode != msgs.MODE_FULL_DUPLEX:
            return (msgs.CONTINUE_REQUEST_TRAILERS,)
        return (*self._release(st, end_of_stream=False), msgs.CONTINUE_REQUEST_TRAILERS)

    def _route_buffered(self, st: StreamState) -> Responses:
        pick = self._decide(st, st.body)
        reply = self._route(st, pick, len(st.body), buffered=True)
        self._drop_body(st)
        return (reply,)

    def _release(self, st: StreamState, end_of_stream: bool) -> Responses:
        """FULL_DUPLEX_STREAMED: decide, then the headers reply and the echoed body (re-run by
        flow control until the decision goes through)."""
        st.resume = lambda: self._release(st, end_of_stream)
        pick = self._decide(st, st.body)
        out = [self._route(st, pick, len(st.body))]
        out.extend(msgs.streamed_chunks(st.body, end_of_stream))
        self._drop_body(st)
        return out

    def _decide(self, st: StreamState, body: bytearray | None) -> Pick:
        t0 = time.perf_counter()
        h = st.headers
        if h is None:
            raise RequestError(400, "request body before request headers")
        if st.admitted_at is not None:  # a late message (the loop was busy): shed, do not route
            self.admission.check(st.admitted_at, self.clock())
        parsed = (
            st.preparsed
            if st.preparsed is not None
            else (parse_body(body, h.path) if body is not None else None)
        )
        if (
            parsed is not None
            and self.settings.served_models
            and parsed.model not in self.settings.served_models
        ):
            raise RequestError(404, f"model {parsed.model!r} is not served by this pool")
        if parsed is not None and not prefills(h.path):  # a token count: routed by load alone
            parsed, st.prekey = None, None
        if parsed is not None and parsed.previous_response_id and self._unknown_here(st, parsed):
            st.preparsed = parsed  # the decision re-runs after the peers answered, unparsed
            raise AskPeers(parsed.previous_response_id)
        view = RequestView(
            request_id=st.ledger_id,
            prompt_tokens=parsed.prompt_tokens if parsed else 0,
            turn=parsed.turn if parsed else 0,
            est_hit_tokens=parsed.est_hit_tokens if parsed else 0,
            session_id=h.session_token,
            ttft_slo_s=h.ttft_slo_s,
            tpot_slo_s=h.tpot_slo_s,
            sheddable=h.sheddable,
        )
        if st.prekey is not None:  # parsed and keyed on the worker pool
            text, key = st.pretext, st.prekey
        else:
            text, key = (self._prompt_text(parsed) if parsed is not None else ""), None
        waited_s = None
        if self.flow is not None:
            waited_s = 0.0 if st.held_since is None else self.clock() - st.held_since
        try:
            pick = self.picker.pick(
                view,
                text,
                parsed.token_ids if parsed else (),
                st.subset,
                key=key,
                previous_response_id=parsed.previous_response_id if parsed else "",
                waited_s=waited_s,
            )
        except RequestError as exc:
            st.parsed = parsed  # the refusal's metrics carry its model, as upstream's
            if exc.status == 503:  # no endpoint could be chosen: a failed scheduling attempt
                self.metrics.scheduling_failed(parsed.model if parsed else "")
            raise
        if self.settings.destination_list == "primary":  # an ORIGINAL_DST gateway: one ip:port
            pick = replace(pick, fallbacks=())
        st.parsed, st.pick, st.dispatched_at = parsed, pick, self.clock()
        self._leave(st)
        if self.settings.response_observer:
            self.observers.expect(st)
        m = self.metrics
        m.decision_latency.observe(time.perf_counter() - t0)
        m.decisions.labels(policy=pick.policy, reason=pick.reason).inc()
        received = st.received_at if st.received_at is not None else st.dispatched_at
        m.routed(
            st.ledger_id, parsed.model if parsed else "", len(st.body), time.perf_counter() - t0, received,
            st.dispatched_at, pick.destination,
        )  # fmt: skip
        m.endpoint_local_hit.labels(endpoint=pick.ledger_address).set(pick.local_hit_tokens)
        self._queued_gauge(pick.ledger_address)
        if decision_log.isEnabledFor(logging.INFO):  # --decision-log / SIGUSR1 (obs.logging)
            decision_log.info(
                "routed",
                extra={
                    "request_id": h.request_id,
                    "picker_request_id": st.ledger_id,
                    "reason": pick.reason,
                    "policy": pick.policy,
                    "destination": pick.destination,
                    "prefill": pick.prefill,
                    "ranked": [pick.destination, *pick.fallbacks],  # the policy's order (best first)
                    # the policy's top candidates with their scores (the prefill pods in PD mode)
                    "top_scores": self.picker.top_scores(),
                    # every candidate's view at this decision (gauges, ledger, hits, scrape age)
                    "endpoints": self.picker.candidate_views(),
                    "cost_s": round(pick.cost_s, 6),
                    "prompt_tokens": view.prompt_tokens,
                    "uncached_tokens": pick.uncached_tokens,
                    "local_hit_tokens": pick.local_hit_tokens,
                    "turn": view.turn,
                },
            )
        return pick

    def _route_header_values(self, st: StreamState, pick: Pick, body_len: int | None) -> dict[str, str]:
        values = {msgs.DEST_HEADER: ",".join(self._addresses(pick)), msgs.PRIMARY_HEADER: pick.destination}
        if body_len is not None:
            values["content-length"] = str(body_len)
        if pick.prefill:
            values[msgs.PREFILLER_HEADER] = pick.prefill
        if st.generated_id and st.headers is not None:
            values[HDR_REQUEST_ID] = st.headers.request_id
        values[PICKER_ID_HEADER] = st.ledger_id
        return values

    def _route(
        self, st: StreamState, pick: Pick, body_len: int | None, buffered: bool = False
    ) -> ep.ProcessingResponse:
        """The routing reply; client copies of routing headers the picker does not set are removed
        (the ones it sets are overwritten)."""
        values = self._route_header_values(st, pick, body_len)
        # x-envoy-* headers are not mutable from ext_proc (Envoy counts a rejected mutation): the
        # gateway's scrub filter removes those.
        remove = tuple(h for h in TRUSTED_HEADERS if h not in values and not h.startswith("x-envoy-"))
        build = msgs.route_buffered_body if buffered else msgs.route_headers
        return build(values, self._addresses(pick), remove)

    @staticmethod
    def _addresses(pick: Pick) -> tuple[str, ...]:
        return (pick.destination, *pick.fallbacks)

    def _refused(self, st: StreamState, status: int) -> None:
        """The upstream families' error counters for a request the picker answered itself."""
        since = None if st.received_at is None or st.pick is not None else self.clock() - st.received_at
        self.metrics.refused(st.parsed.model if st.parsed is not None else "", status, since)

    def _refuse(self, st: StreamState, status: int, message: str) -> ep.ProcessingResponse:
        self.metrics.immediate_responses.labels(code=str(status)).inc()
        self._refused(st, status)
        if status >= 500:
            log.warning("refused request %s with %d: %s", st.request_id, status, message)
        else:
            log.info("refused request %s with %d: %s", st.request_id, status, message)
        return msgs.immediate(status, message)

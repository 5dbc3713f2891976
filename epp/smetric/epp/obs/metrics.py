"""Prometheus metrics of the picker, registered on a registry the caller passes (no global state).

The data-source side reports KV-event sequence gaps through :class:`KvEventGapCounter` (its
``on_gap`` is the KV-event subscriber's ``GapCallback``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smetric.epp.obs.labels import ModelLabels, status_label
from smetric.epp.obs.llmd_metrics import LlmdMetrics
from smetric.epp.obs.upstream_metrics import UpstreamMetrics, build_ref

# 50 us .. 1 s: the decision itself is sub-millisecond; the tail shows GC / event-loop stalls.
LATENCY_BUCKETS_S = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)


class PickerMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        pool_name: str = "",
        models: ModelLabels | None = None,
        pool_namespace: str = "",
    ) -> None:
        """``models``: the bounded model label values (default: no served model known, every
        named model is ``other`` until :meth:`ModelLabels.discover_from` / ``configure``);
        ``pool_namespace``: the pool's namespace (the ``namespace`` label of scheduling attempts)."""
        self.registry = registry
        self.models = models if models is not None else ModelLabels()
        self.upstream = UpstreamMetrics(registry, pool_name, self.models)  # GIE's series, beside these
        # llm-d-router's llm_d_epp_* series
        self.llmd = LlmdMetrics(registry, pool_name, pool_namespace, self.models, build_ref())
        self.decisions = Counter(
            "smetric_epp_decisions",
            "Routing decisions by policy and reason (stick/migrate/balance/evicted)",
            ["policy", "reason"],
            registry=registry,
        )
        self.decision_latency = Histogram(
            "smetric_epp_decision_latency_seconds",
            "Time from complete request body to routing decision (parse + policy)",
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.immediate_responses = Counter(
            "smetric_epp_immediate_responses",
            "Requests answered by the picker itself, by HTTP status",
            ["code"],
            registry=registry,
        )
        self.endpoint_local_hit = Gauge(
            "smetric_epp_endpoint_local_hit_tokens",
            "Estimated local prefix hit of the last routed request, per endpoint",
            ["endpoint"],
            registry=registry,
        )
        self.endpoint_queued_prefill = Gauge(
            "smetric_epp_endpoint_queued_prefill_seconds",
            "Dispatch ledger: cost-model seconds of prefill dispatched but not yet first-tokened",
            ["endpoint"],
            registry=registry,
        )
        self.endpoint_prefill_speed = Gauge(
            "smetric_epp_endpoint_prefill_speed",
            "Online prefill speed estimate (cost seconds per wall second; until 8 samples, the median of the endpoints with 8)",
            ["endpoint"],
            registry=registry,
        )
        self.endpoint_errors = Counter(
            "smetric_epp_endpoint_errors",
            "Responses with a status other than 200, per endpoint",
            ["endpoint", "code"],
            registry=registry,
        )
        self.endpoint_ejections = Counter(
            "smetric_epp_endpoint_ejections",
            "Endpoints ejected from routing by the picker's outlier detection (5xx, 429 or failed "
            "attempts in a row, or a failed probe)",
            ["endpoint"],
            registry=registry,
        )
        self.ttft = Histogram(
            "smetric_epp_ttft_seconds",
            "Time from dispatch to first response body chunk (streaming responses)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
            registry=registry,
        )
        self.tpot = Histogram(
            "smetric_epp_tpot_seconds",
            "Time per output token after the first: (end - first token) / (completion tokens - 1), "
            "streaming responses that report usage",
            buckets=(0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28),
            registry=registry,
        )
        self.usage_tokens = Counter(
            "smetric_epp_usage_tokens",
            "Token usage reported by the model servers (kind = prompt | completion | cached)",
            ["kind"],
            registry=registry,
        )
        self.ready_endpoints = Gauge("smetric_epp_ready_endpoints", "Ready endpoints", registry=registry)
        self.stale_endpoints = Gauge(
            "smetric_epp_stale_endpoints",
            "Ready endpoints whose metrics are older than the staleness threshold",
            registry=registry,
        )
        self.kv_event_gaps = Counter(
            "smetric_epp_kv_event_gaps",
            "KV-event sequence gaps (lost events; that endpoint's index is resynchronised)",
            ["endpoint"],
            registry=registry,
        )
        self.active_streams = Gauge("smetric_epp_active_streams", "Open ext_proc streams", registry=registry)
        self.shed = Counter(
            "smetric_epp_shed",
            "Requests refused by admission control (503 + retry-after): inflight (too many requests "
            "waiting for a decision, --max-inflight-decisions), deadline (no decision within "
            "--decision-budget-ms of the request headers)",
            ["reason"],
            registry=registry,
        )
        self.observer_streams = Counter(
            "smetric_epp_observer_streams",
            "Response-observer streams (--response-path=observer) by outcome: matched a decision, "
            "unmatched (no decision waiting under that x-request-id), missing (a decision's observer "
            "never came within the attach timeout)",
            ["outcome"],
            registry=registry,
        )
        self.response_peer_asks = Counter(
            "smetric_epp_response_peer_asks",
            "Responses follow-ups whose previous response this replica had not heard of, asked of "
            "its --peers: found (a peer knew its engine) or unknown (none answered with it in time)",
            ["outcome"],
            registry=registry,
        )

    # -- the upstream families (GIE's and llm-d-router's) ------------------------------------------

    def routed(
        self, request_id: str, model: str, body_bytes: int, decision_s: float, received_at: float, now: float,
        destination: str,
    ) -> None:  # fmt: skip
        """A request was routed to ``destination``: ``received_at`` its request headers' time and
        ``now`` the decision's (the servicer's clock)."""
        self.upstream.routed(
            request_id, model, body_bytes, decision_s, self.llmd.endpoint_labels(destination)
        )
        self.llmd.routed(request_id, model, body_bytes, decision_s, received_at, now, destination)

    def scheduling_failed(self, model: str) -> None:
        """No endpoint could be chosen (the policy's 503)."""
        self.upstream.scheduling_failed(model)
        self.llmd.scheduling_failed(model)

    def refused(self, model: str, status: int, processing_s: float | None) -> None:
        """The picker answered the request with ``status`` itself; ``processing_s``: request
        headers to the refusal, ``None`` for a request already routed."""
        self.upstream.refused(model, status)
        self.llmd.refused(model, status, processing_s)

    def endpoint_error(self, endpoint: str, status: int) -> None:
        self.endpoint_errors.labels(endpoint=endpoint, code=status_label(status)).inc()

    def forget_endpoint(self, address: str) -> None:
        """Discovery dropped ``address``: its per-endpoint series go (pods come and go under new
        addresses; without this the series of every pod the pool ever had would stay)."""
        for metric in (
            self.endpoint_local_hit,
            self.endpoint_queued_prefill,
            self.endpoint_prefill_speed,
            self.kv_event_gaps,
        ):
            metric.remove(address)  # no-op when the endpoint has no series
        self.endpoint_errors.remove_by_labels({"endpoint": address})
        labels = self.llmd.forget(address)  # the upstream families' scheduling attempts
        if labels is not None:
            name, namespace, port = labels
            self.upstream.attempts.remove_by_labels({"pod_name": name, "namespace": namespace, "port": port})


class KvEventGapCounter:
    """Callback object handed to the KV-event subscriber: ``on_gap(address)`` per detected gap."""

    __slots__ = ("_counter",)

    def __init__(self, metrics: PickerMetrics) -> None:
        self._counter = metrics.kv_event_gaps

    def on_gap(self, address: str) -> None:
        self._counter.labels(endpoint=address).inc()

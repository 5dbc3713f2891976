"""llm-d-router v0.10.0's EPP series (``llm_d_epp_*``), exported beside ``smetric_epp_*``.

Names, types, label names and buckets are upstream's (``pkg/epp/metrics/llm_d_router_metrics.go``,
``pkg/epp/metrics/grpc_stream_metrics.go``; each claim with its line in
:mod:`smetric.epp.obs.parity`), and so is what moves them (``pkg/epp/handlers/server.go``,
``response.go``, ``pkg/epp/datalayer/logger/logger.go``):

* per request, labels ``model_name``, ``target_model_name`` (bounded: a served model or ``other``,
  :mod:`smetric.epp.obs.labels`; no model rewriting, so the target is the same), ``fairness_id``
  = ``default-flow`` (upstream's ``metadata.DefaultFairnessID``, consts.go:67: the picker keeps
  no fairness queues, so every request is in the default flow, and no header value becomes a
  label) and ``priority`` = ``0`` (no InferenceObjective priorities): ``request_total`` and ``request_size_bytes`` when the request
  is routed (server.go:497-498); ``request_running`` from then until its stream ends;
  ``request_error_total`` once per request, ``error_code`` = upstream's canonical code (a refusal:
  its status through :func:`~smetric.epp.obs.labels.error_code`; a model server's status other
  than 200: ``ModelServerError``, server.go:517-518); at the end of the response (response.go
  :82-93): ``request_duration_seconds`` (request headers to the response's end),
  ``response_size_bytes``, the usage's ``request_input_tokens`` / ``output`` / ``cached``,
  ``request_ntpot_seconds``, ``request_ttft_seconds`` (request headers to the first non-empty
  response chunk; a response that is not a stream counts at its end, as upstream buffers it;
  ``streaming`` = ``true`` / ``false``), ``request_streaming_tpot_seconds`` (streams with more
  than one output token: (duration - TTFT) / (tokens - 1)); ``request_streaming_itl_seconds``
  between consecutive non-empty chunks of a stream (response.go:59-66);
* per pool (``name`` = the pool, ``standalone`` without one), from the endpoints whose metrics are
  fresh (logger.go:112-128): ``ready_endpoints``, mean and sample standard deviation (n - 1, at
  least 1; rounded to 2 decimals) of KV-cache utilization, waiting and running requests;
  ``per_endpoint_queue_size`` (each ready endpoint's waiting requests; ``model_server_endpoint`` =
  its pod name, its address without one);
* ``scheduler_e2e_duration_seconds`` (the decision), ``scheduler_attempts_total`` (``success``
  with the chosen endpoint's pod name, namespace and port; ``failure`` with empty endpoint labels
  when no endpoint could be chosen: a 503 from the policy), ``request_processing_duration_seconds``
  (request headers to the routing reply or the refusal), ``response_processing_duration_seconds``
  (a stream: the picker's own time on each response message; otherwise response headers to the
  end), ``info``;
* ext_proc streams (upstream: behind ``--enable-grpc-stream-metrics``; always on here):
  ``extproc_streams_inflight``, ``extproc_stream_duration_seconds``, ``extproc_streams_total``
  (``code`` = ``OK``, ``Canceled`` or ``Unknown``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smetric.epp.contracts import EndpointInfo, EngineMetrics
from smetric.epp.obs.chunk_histogram import ChunkHistogram, ChunkSeries
from smetric.epp.obs.labels import MODEL_SERVER_ERROR, ModelLabels, error_code

PREFIX = "llm_d_epp"
FAIRNESS_ID = "default-flow"  # llm-d-router v0.10.0 pkg/epp/metadata/consts.go:67
PRIORITY = "0"
REQ_LABELS = ("model_name", "target_model_name", "fairness_id", "priority")
POOL_LABELS = ("name",)

# llm_d_router_metrics.go buckets, by the line of each metric
LATENCY_BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60,
    120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip  # metrics.go:60 generalLatencyBuckets
REQ_SIZE_BUCKETS = tuple(float(2**k) for k in range(6, 31))  # :73-77, 64 B .. 1 GiB
RESP_SIZE_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536)  # :87
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072,
                 262144, 524288, 1048576)  # fmt: skip  # :97, :117
OUTPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # :107
NTPOT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)  # :136-138
TTFT_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20,
                30, 45, 60, 120)  # fmt: skip  # :148-151
TPOT_BUCKETS = (0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5,
                0.6, 0.8, 1, 2)  # fmt: skip  # :161-164
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2)  # :174-176
SCHED_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)  # :255-257
REQ_PROC_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5, 5,
                    10)  # fmt: skip  # :288-290
RESP_PROC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                     2.5, 5)  # fmt: skip  # :300-302
STREAM_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)  # grpc_stream_metrics.go:44


class _Series:
    """The per-request series of one model label value, each looked up once per value (at most
    :data:`~smetric.epp.obs.labels.MAX_MODEL_LABELS` + 2 values) instead of once per request,
    and made at its first observation (a series upstream never observed is not exposed)."""

    __slots__ = ("_children", "req_size", "requests", "running", "values")

    def __init__(self, m: LlmdMetrics, model: str) -> None:
        self.values = (model, model, FAIRNESS_ID, PRIORITY)
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        # observed for every routed request
        self.requests = m.requests.labels(*self.values)
        self.req_size = m.req_size.labels(*self.values)
        self.running = m.running.labels(*self.values)

    def __call__(self, metric: Any, *extra: str) -> Any:
        """``metric``'s child for this model (``extra``: its further label values, bounded)."""
        key = (metric, extra)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*self.values, *extra)
        return child


class _Req:
    """One routed request until its stream ends."""

    __slots__ = ("first_at", "headers_at", "itl", "last_at", "proc_s", "received_at", "resp_bytes", "series",
                 "status", "streaming")  # fmt: skip

    def __init__(self, series: _Series, received_at: float) -> None:
        self.series = series
        self.itl: ChunkSeries | None = None  # its inter-token series, from its first gap
        self.received_at = received_at
        self.status = 0
        self.streaming = False
        self.headers_at: float | None = None
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.resp_bytes = 0
        self.proc_s = 0.0


def _stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation, both rounded to 2 decimals (logger.go:143-186)."""
    mean = sum(values) / len(values)
    ss = sum((v - mean) ** 2 for v in values)
    return round(mean, 2), round(math.sqrt(ss / max(1.0, len(values) - 1)), 2)


class LlmdMetrics:
    """The servicer calls :meth:`routed` ... :meth:`finished`; the health refresh :meth:`pool`."""

    def __init__(
        self, registry: CollectorRegistry, pool_name: str, namespace: str, models: ModelLabels, build_ref: str
    ) -> None:
        r, p = registry, PREFIX
        self.pool_name = pool_name or "standalone"
        self.namespace = namespace
        self.models = models
        self._running: dict[str, _Req] = {}  # request id -> its state, until its stream ends
        self._series: dict[str, _Series] = {}  # model label value -> its per-request series
        self._names: dict[str, str] = {}  # address -> pod name (the ready endpoints)
        self._attempted: dict[str, tuple[str, str, str]] = {}  # address -> its attempts' endpoint labels
        self._endpoints: Callable[[], Sequence[EndpointInfo]] = tuple
        self._per_endpoint: set[str] = set()

        def hist(
            name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = REQ_LABELS
        ) -> Histogram:
            return Histogram(f"{p}_{name}", doc, labels, buckets=buckets, registry=r)

        self.requests = Counter(f"{p}_request", "Total number of processed requests.", REQ_LABELS, registry=r)
        self.errors = Counter(
            f"{p}_request_error", "Total number of request errors.", (*REQ_LABELS, "error_code"), registry=r
        )
        self.duration = hist(
            "request_duration_seconds", "End-to-end request latency in seconds.", LATENCY_BUCKETS
        )
        self.req_size = hist("request_size_bytes", "Incoming request body size in bytes.", REQ_SIZE_BUCKETS)
        self.resp_size = hist(
            "response_size_bytes", "Outgoing response body size in bytes.", RESP_SIZE_BUCKETS
        )
        self.input_tokens = hist("request_input_tokens", "Input token count per request.", TOKEN_BUCKETS)
        self.output_tokens = hist(
            "request_output_tokens", "Output token count per request.", OUTPUT_TOKEN_BUCKETS
        )
        self.cached_tokens = hist(
            "request_cached_tokens", "Prompt tokens read from cache per request, as the model server reports.",
            TOKEN_BUCKETS,
        )  # fmt: skip
        self.running = Gauge(f"{p}_request_running", "Current number of active running requests.", REQ_LABELS,
                             registry=r)  # fmt: skip
        self.ntpot = hist(
            "request_ntpot_seconds",
            "End-to-end latency divided by output token count, in seconds.",
            NTPOT_BUCKETS,
        )
        self.ttft = hist(
            "request_ttft_seconds",
            "Time to first token in seconds, from request received to first response byte (a non-streaming "
            "response: its total duration).",
            TTFT_BUCKETS,
            (*REQ_LABELS, "streaming"),
        )
        self.tpot = hist(
            "request_streaming_tpot_seconds",
            "Time per output token of a stream, (e2e - TTFT) / (output_tokens - 1), in seconds.",
            TPOT_BUCKETS,
        )
        # one observation per response chunk: the lock-free histogram of the per-chunk path
        self.itl = ChunkHistogram(
            f"{p}_request_streaming_itl_seconds", "Time between consecutive response chunks of a stream, in seconds.",
            REQ_LABELS, ITL_BUCKETS, r,
        )  # fmt: skip

        def pool_gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"{p}_{name}", doc, POOL_LABELS, registry=r)

        self.pool_kv = pool_gauge("average_kv_cache_utilization", "Average KV-cache utilization of the pool.")
        self.pool_queue = pool_gauge("average_queue_size", "Average number of requests waiting in the pool.")
        self.pool_running = pool_gauge("average_running_requests", "Average number of running requests.")
        self.pool_kv_sd = pool_gauge(
            "std_dev_kv_cache_utilization", "Standard deviation of KV-cache utilization."
        )
        self.pool_queue_sd = pool_gauge("std_dev_queue_size", "Standard deviation of waiting requests.")
        self.pool_running_sd = pool_gauge(
            "std_dev_running_requests", "Standard deviation of running requests."
        )
        self.pool_ready = pool_gauge("ready_endpoints", "Ready endpoints (fresh metrics) in the pool.")
        self.per_endpoint_queue = Gauge(
            f"{p}_per_endpoint_queue_size", "Requests waiting in each endpoint's queue.",
            ("name", "model_server_endpoint"), registry=r,
        )  # fmt: skip
        self.scheduler = Histogram(
            f"{p}_scheduler_e2e_duration_seconds",
            "Scheduling latency in seconds.",
            buckets=SCHED_BUCKETS,
            registry=r,
        )
        self.attempts = Counter(
            f"{p}_scheduler_attempts", "Total number of scheduling attempts.",
            ("status", "target_model_name", "endpoint_name", "namespace", "port"), registry=r,
        )  # fmt: skip
        self.req_proc = Histogram(
            f"{p}_request_processing_duration_seconds",
            "Picker time from request receipt until the request body has been handled.",
            buckets=REQ_PROC_BUCKETS, registry=r,
        )  # fmt: skip
        self.resp_proc = Histogram(
            f"{p}_response_processing_duration_seconds",
            "Picker response processing time: a stream's per-message handler time, else headers to end.",
            buckets=RESP_PROC_BUCKETS, registry=r,
        )  # fmt: skip
        Gauge(f"{p}_info", "Build information.", ("commit", "build_ref"), registry=r).labels(
            "", build_ref
        ).set(1)
        self.streams_inflight = Gauge(f"{p}_extproc_streams_inflight", "Open ext_proc streams.", registry=r)
        self.stream_duration = Histogram(
            f"{p}_extproc_stream_duration_seconds", "How long an ext_proc stream stays open, in seconds.",
            buckets=STREAM_BUCKETS, registry=r,
        )  # fmt: skip
        self.streams = Counter(f"{p}_extproc_streams", "Completed ext_proc streams by gRPC status code.", ("code",),
                               registry=r)  # fmt: skip

    def _of(self, model: str) -> _Series:
        """The series of a request's model (through the bounded model label)."""
        value = self.models(model)
        series = self._series.get(value)
        if series is None:
            series = self._series[value] = _Series(self, value)
        return series

    # -- endpoints --------------------------------------------------------------------------------

    def names_from(self, endpoints: Callable[[], Sequence[EndpointInfo]]) -> None:
        """Where pod names are looked up (discovery's ready endpoints)."""
        self._endpoints = endpoints
        self._names = {}

    def endpoint_labels(self, address: str) -> tuple[str, str, str]:
        """``endpoint_name`` (pod name, else the address), ``namespace``, ``port`` of an address
        discovery listed; the name map is rebuilt from discovery on a miss (bounded by the pool)."""
        if address not in self._names:
            self._names = {e.address: e.pod_name or e.address for e in self._endpoints()}
        host, _, port = address.rpartition(":")
        labels = (self._names.get(address, address), self.namespace, port if host else "")
        self._attempted[address] = labels  # until discovery drops the address (forget)
        return labels

    def forget(self, address: str) -> tuple[str, str, str] | None:
        """Discovery dropped ``address``: its scheduling-attempt series go; returns the endpoint
        labels they had (``None``: none)."""
        labels = self._attempted.pop(address, None)
        if labels is not None:
            name, namespace, port = labels
            self.attempts.remove_by_labels({"endpoint_name": name, "namespace": namespace, "port": port})
        return labels

    # -- requests ---------------------------------------------------------------------------------

    def routed(
        self, request_id: str, model: str, body_bytes: int, decision_s: float, received_at: float, now: float,
        endpoint: str,
    ) -> None:  # fmt: skip
        series = self._of(model)
        series.requests.inc()
        series.req_size.observe(body_bytes)
        series.running.inc()
        self.scheduler.observe(decision_s)
        self.attempts.labels("success", series.values[0], *self.endpoint_labels(endpoint)).inc()
        self.req_proc.observe(max(0.0, now - received_at))
        self._running[request_id] = _Req(series, received_at)

    def scheduling_failed(self, model: str) -> None:
        """No endpoint could be chosen (the policy's 503)."""
        self.attempts.labels("failure", self.models(model), "", "", "").inc()

    def refused(self, model: str, status: int, processing_s: float | None) -> None:
        """The picker answered the request itself (never routed)."""
        self._of(model)(self.errors, error_code(status)).inc()
        if processing_s is not None:
            self.req_proc.observe(max(0.0, processing_s))

    def response_headers(self, request_id: str, status: int, streaming: bool, now: float) -> None:
        req = self._running.get(request_id)
        if req is not None:
            req.status, req.streaming, req.headers_at = status, streaming, now

    def response_chunk(self, request_id: str, nbytes: int, now: float) -> None:
        req = self._running.get(request_id)
        if req is None or nbytes <= 0:
            return
        req.resp_bytes += nbytes
        if req.first_at is None:
            req.first_at = now
        if req.streaming:
            if req.last_at is not None:
                if req.itl is None:
                    req.itl = req.series(self.itl)
                req.itl.observe(max(0.0, now - req.last_at))
            req.last_at = now

    def handler_time(self, request_id: str, seconds: float) -> None:
        """The picker's own time on one response message of ``request_id``."""
        req = self._running.get(request_id)
        if req is not None:
            req.proc_s += seconds

    def finished(
        self, request_id: str, now: float, complete: bool, prompt: int = 0, completion: int = 0,
        cached: int | None = None,
    ) -> None:  # fmt: skip
        """The stream ended: ``complete`` when the response reached its end (usage known then).
        Idempotent per request."""
        req = self._running.pop(request_id, None)
        if req is None:
            return
        series = req.series
        series.running.dec()
        if req.status not in (0, 200):
            series(self.errors, MODEL_SERVER_ERROR).inc()
        if req.streaming and req.proc_s > 0:
            self.resp_proc.observe(req.proc_s)
        elif not req.streaming and complete and req.headers_at is not None:
            self.resp_proc.observe(max(0.0, now - req.headers_at))
        if not complete:
            return
        duration = now - req.received_at
        if duration > 0:
            series(self.duration).observe(duration)
            if completion > 0:
                series(self.ntpot).observe(duration / completion)
        series(self.resp_size).observe(req.resp_bytes)
        if prompt > 0:
            series(self.input_tokens).observe(prompt)
        if completion > 0:
            series(self.output_tokens).observe(completion)
        if cached is not None:
            series(self.cached_tokens).observe(cached)
        first = req.first_at if req.streaming else now  # upstream buffers a non-streaming answer
        if first is None or first <= req.received_at:
            return
        ttft = first - req.received_at
        series(self.ttft, "true" if req.streaming else "false").observe(ttft)
        if req.streaming and completion > 1 and now > first:
            series(self.tpot).observe((duration - ttft) / (completion - 1))

    # -- streams ----------------------------------------------------------------------------------

    def stream_opened(self) -> None:
        self.streams_inflight.inc()

    def stream_closed(self, duration_s: float, code: str) -> None:
        self.streams_inflight.dec()
        self.stream_duration.observe(max(0.0, duration_s))
        self.streams.labels(code).inc()

    # -- pool -------------------------------------------------------------------------------------

    def pool(self, endpoints: Sequence[EndpointInfo], fresh: Sequence[EngineMetrics],
             current: Sequence[tuple[EndpointInfo, EngineMetrics]]) -> None:  # fmt: skip
        """``fresh``: the metrics of the ready endpoints that are not stale; ``current``: every
        ready endpoint with metrics."""
        name = self.pool_name
        self._names = {e.address: e.pod_name or e.address for e in endpoints}
        self.pool_ready.labels(name).set(len(fresh))
        if fresh:
            for (mean_g, sd_g), values in (
                ((self.pool_kv, self.pool_kv_sd), [m.kv_usage for m in fresh]),
                ((self.pool_queue, self.pool_queue_sd), [float(m.waiting) for m in fresh]),
                ((self.pool_running, self.pool_running_sd), [float(m.running) for m in fresh]),
            ):
                mean, sd = _stats(values)
                mean_g.labels(name).set(mean)
                sd_g.labels(name).set(sd)
        seen = set()
        for info, m in current:
            pod = info.pod_name or info.address
            seen.add(pod)
            self.per_endpoint_queue.labels(name, pod).set(m.waiting)
        for gone in self._per_endpoint - seen:
            self.per_endpoint_queue.remove(name, gone)
        self._per_endpoint = seen

"""Upstream's metric series, exported beside ``smetric_epp_*`` where the meaning is the same.

Names, labels and buckets are those of GIE's ``pkg/epp/metrics/metrics.go``: v1.0.0 (the version
``docs/deploy.md`` pins) names the per-model family ``inference_model_*``; v1.1.0 and later name it
``inference_objective_*`` with the same series. Both families are exported, so dashboards of
either version work. Exported:

* per model (``model_name``, bounded: a model the pool serves or ``other``,
  :mod:`smetric.epp.obs.labels`; ``target_model_name`` = the same, no model rewriting here):
  ``request_total`` (v1.5.0 adds ``priority`` to the ``inference_objective`` one, metrics.go:91:
  ``0`` here, no InferenceObjective priorities), ``request_error_total`` (``error_code`` =
  upstream's canonical code, pkg/common/error/error.go:58-69:
  :func:`~smetric.epp.obs.labels.error_code` of a refusal's status, ``ModelServerError`` for a
  model server's status other than 200),
  ``request_duration_seconds`` (the decision to the end of the response), ``request_sizes``
  (body bytes), ``response_sizes`` (response body bytes), ``input_tokens`` / ``output_tokens``
  (the engine's ``usage``),
  ``normalized_time_per_output_token_seconds`` (duration / output tokens), ``running_requests``;
* per pool (``name`` = the InferencePool): ``inference_pool_ready_pods``,
  ``inference_pool_average_kv_cache_utilization``, ``inference_pool_average_queue_size``,
  ``inference_pool_average_running_requests`` (v1.5.0), ``inference_pool_per_pod_queue_size``
  (``model_server_pod`` = the pod name, else the address; collectors/inference_pool.go);
* ``inference_extension_scheduler_e2e_duration_seconds`` (the routing decision),
  ``inference_extension_scheduler_attempts_total`` (v1.5.0: ``success`` with the chosen pod's
  name, namespace and port, ``failure`` with empty ones when no endpoint could be chosen),
  ``inference_extension_info`` (``commit``, ``build_ref``).
* v1.3.0+ (``inference_objective_*`` only): ``request_ttft_seconds``, ``request_tpot_seconds``
  (streaming responses: the first chunk after the decision; the rest per output token after the
  first), ``prompt_cached_tokens`` (the engine's ``usage`` cached tokens).

What v1.5.0 has that is not exported, and why: :data:`smetric.epp.obs.parity.GIE_NOT_EXPORTED`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smetric.epp.obs.labels import MODEL_SERVER_ERROR, ModelLabels, error_code

FAMILIES = ("inference_model", "inference_objective")
DURATION_BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60,
    120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
SIZE_BUCKETS = tuple(float(2**k) for k in range(6, 31))  # 64 B .. 1 GiB
RESPONSE_SIZE_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536)
INPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072,
                       262144, 524288, 1048576)  # fmt: skip
OUTPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
NTPOT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
TPOT_BUCKETS = (0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5,
                0.6, 0.8, 1, 1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60, 90, 120, 180, 270, 360)  # fmt: skip
SCHEDULER_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
MODEL_LABELS = ("model_name", "target_model_name")
PRIORITY = "0"


class _Family:
    """One per-model family (``inference_model`` or ``inference_objective``)."""

    def __init__(self, prefix: str, registry: CollectorRegistry) -> None:
        r = registry
        # v1.1.0+ (inference_objective): the request counter carries the priority too
        self.latest = prefix == "inference_objective"
        request_labels = (*MODEL_LABELS, "priority") if self.latest else MODEL_LABELS
        self.requests = Counter(f"{prefix}_request", "Requests per model", request_labels, registry=r)
        self.errors = Counter(
            f"{prefix}_request_error", "Request errors per model", (*MODEL_LABELS, "error_code"), registry=r
        )
        self.duration = Histogram(
            f"{prefix}_request_duration_seconds",
            "Response latency per model",
            MODEL_LABELS,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.sizes = Histogram(
            f"{prefix}_request_sizes", "Request size in bytes", MODEL_LABELS, buckets=SIZE_BUCKETS, registry=r
        )
        self.response_sizes = Histogram(
            f"{prefix}_response_sizes",
            "Response size in bytes",
            MODEL_LABELS,
            buckets=RESPONSE_SIZE_BUCKETS,
            registry=r,
        )
        self.input_tokens = Histogram(
            f"{prefix}_input_tokens",
            "Input tokens per request",
            MODEL_LABELS,
            buckets=INPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.output_tokens = Histogram(
            f"{prefix}_output_tokens",
            "Output tokens per request",
            MODEL_LABELS,
            buckets=OUTPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.ntpot = Histogram(
            f"{prefix}_normalized_time_per_output_token_seconds",
            "Request latency divided by its output tokens",
            MODEL_LABELS,
            buckets=NTPOT_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            f"{prefix}_running_requests", "Running requests per model", ("model_name",), registry=r
        )
        # v1.3.0 and later (the inference_objective family only)
        if self.latest:
            self.ttft = Histogram(
                f"{prefix}_request_ttft_seconds",
                "Time to first token (streaming responses)",
                MODEL_LABELS,
                buckets=DURATION_BUCKETS,
                registry=r,
            )
            self.tpot = Histogram(
                f"{prefix}_request_tpot_seconds",
                "Time per output token after the first (streaming responses)",
                MODEL_LABELS,
                buckets=TPOT_BUCKETS,
                registry=r,
            )
            self.cached_tokens = Histogram(
                f"{prefix}_prompt_cached_tokens",
                "Prompt tokens the model server reported as cached",
                MODEL_LABELS,
                buckets=INPUT_TOKEN_BUCKETS,
                registry=r,
            )


class UpstreamMetrics:
    """The upstream series; the servicer calls :meth:`routed`, :meth:`refused`, :meth:`finished`."""

    def __init__(self, registry: CollectorRegistry, pool_name: str, models: ModelLabels) -> None:
        """``models``: a request's ``model`` -> its label value (bounded, :mod:`smetric.epp.obs.labels`)."""
        self.pool_name = pool_name or "standalone"
        self.models = models
        self._families = tuple(_Family(prefix, registry) for prefix in FAMILIES)
        self._running: dict[str, str] = {}  # request id -> model, until its stream or response ends
        self.pool_ready = Gauge(
            "inference_pool_ready_pods", "Ready pods in the pool", ("name",), registry=registry
        )
        self.pool_kv = Gauge(
            "inference_pool_average_kv_cache_utilization",
            "Average KV-cache utilization of the pool's ready pods",
            ("name",),
            registry=registry,
        )
        self.pool_queue = Gauge(
            "inference_pool_average_queue_size",
            "Average number of requests waiting in the pool's ready pods",
            ("name",),
            registry=registry,
        )
        self.pool_running = Gauge(
            "inference_pool_average_running_requests",
            "Average number of running requests in the pool's ready pods",
            ("name",),
            registry=registry,
        )
        self.per_pod_queue = Gauge(
            "inference_pool_per_pod_queue_size",
            "Requests waiting in each pod's queue",
            ("name", "model_server_pod"),
            registry=registry,
        )
        self._per_pod: set[str] = set()
        self.attempts = Counter(
            "inference_extension_scheduler_attempts",
            "Scheduling attempts",
            ("status", "target_model_name", "pod_name", "namespace", "port"),
            registry=registry,
        )
        self.scheduler = Histogram(
            "inference_extension_scheduler_e2e_duration_seconds",
            "Routing decision latency",
            buckets=SCHEDULER_BUCKETS,
            registry=registry,
        )
        info = Gauge(
            "inference_extension_info", "Build information", ("commit", "build_ref"), registry=registry
        )
        info.labels(commit="", build_ref=build_ref()).set(1)

    def routed(
        self,
        request_id: str,
        model: str,
        body_bytes: int,
        decision_s: float,
        endpoint: tuple[str, str, str] = ("", "", ""),
    ) -> None:
        """``endpoint``: the chosen pod's name, namespace and port."""
        self.scheduler.observe(decision_s)
        model = self.models(model)
        self.attempts.labels("success", model, *endpoint).inc()
        for f in self._families:
            if f.latest:
                f.requests.labels(model, model, PRIORITY).inc()
            else:
                f.requests.labels(model, model).inc()
            f.sizes.labels(model, model).observe(body_bytes)
            f.running.labels(model).inc()
        self._running[request_id] = model

    def scheduling_failed(self, model: str) -> None:
        self.attempts.labels("failure", self.models(model), "", "", "").inc()

    def refused(self, model: str, status: int) -> None:
        model = self.models(model)
        for f in self._families:
            f.errors.labels(model, model, error_code(status)).inc()

    def finished(
        self,
        request_id: str,
        status: int,
        duration_s: float | None,
        prompt_tokens: int,
        output_tokens: int,
        *,
        ttft_s: float | None = None,
        cached_tokens: int = 0,
        response_bytes: int = 0,
    ) -> None:
        """The response ended (``duration_s`` known) or the stream ended without one (``None``);
        idempotent per request: the second call for the same id does nothing. ``ttft_s``: a
        streaming response's first chunk after the decision."""
        model = self._running.pop(request_id, None)
        if model is None:
            return
        for f in self._families:
            f.running.labels(model).dec()
            if duration_s is None:
                continue
            if status != 200:
                f.errors.labels(model, model, MODEL_SERVER_ERROR).inc()
                continue
            f.duration.labels(model, model).observe(duration_s)
            f.response_sizes.labels(model, model).observe(response_bytes)
            if prompt_tokens:
                f.input_tokens.labels(model, model).observe(prompt_tokens)
            if output_tokens:
                f.output_tokens.labels(model, model).observe(output_tokens)
                f.ntpot.labels(model, model).observe(duration_s / output_tokens)
            if not f.latest:
                continue
            if cached_tokens:
                f.cached_tokens.labels(model, model).observe(cached_tokens)
            if ttft_s is not None:
                f.ttft.labels(model, model).observe(ttft_s)
                if output_tokens > 1:
                    f.tpot.labels(model, model).observe(max(0.0, duration_s - ttft_s) / (output_tokens - 1))

    def pool(
        self,
        ready: int,
        kv_usages: list[float],
        queues: list[int],
        running: list[int] | None = None,
        per_pod: dict[str, int] | None = None,
    ) -> None:
        """``per_pod``: pod name (else address) -> its waiting requests."""
        name = self.pool_name
        self.pool_ready.labels(name).set(ready)
        self.pool_kv.labels(name).set(sum(kv_usages) / len(kv_usages) if kv_usages else 0.0)
        self.pool_queue.labels(name).set(sum(queues) / len(queues) if queues else 0.0)
        running = running or []
        self.pool_running.labels(name).set(sum(running) / len(running) if running else 0.0)
        per_pod = per_pod or {}
        for pod, waiting in per_pod.items():
            self.per_pod_queue.labels(name, pod).set(waiting)
        for gone in self._per_pod - per_pod.keys():
            self.per_pod_queue.remove(name, gone)
        self._per_pod = set(per_pod)


def build_ref() -> str:
    try:
        return version("smetric")
    except PackageNotFoundError:
        return ""

"""The upstream pickers' metric names this picker claims to export, and those it does not (data only).

Each :class:`Claim` is transcribed from upstream's own source at a pinned tag (``source``: file and
line of the metric's ``Name:``); the parity test (``tests/unit/epp/test_epp_metric_parity.py``)
scrapes the picker's registry after routed requests and checks each claim's type and label names
with ``prometheus_client.parser``, and docs/picker.md's tables are generated from these tuples
(``python docs/gen.py``), so the list, the registry and the docs cannot drift apart.

* ``LLMD_CLAIMS`` / ``LLMD_NOT_EXPORTED``: llm-d-router v0.10.0 (``llm-d/llm-d-router``), the
  ``llm_d_epp_*`` family (``pkg/epp/metrics/llm_d_router_metrics.go`` and the plugins' own files).
* ``GIE_CLAIMS`` / ``GIE_NOT_EXPORTED``: gateway-api-inference-extension v1.5.0
  (``pkg/epp/metrics/metrics.go``, ``pkg/epp/metrics/collectors/inference_pool.go``); the v1.0.0
  ``inference_model_*`` twins the picker also exports are not repeated here.
"""

from __future__ import annotations

from dataclasses import dataclass

LLMD_REF = "llm-d/llm-d-router v0.10.0"
GIE_REF = "kubernetes-sigs/gateway-api-inference-extension v1.5.0"

LLMD_FILE = "pkg/epp/metrics/llm_d_router_metrics.go"
GIE_FILE = "pkg/epp/metrics/metrics.go"


@dataclass(frozen=True, slots=True)
class Claim:
    """``name``: as exposed (a counter's with its ``_total``); ``kind``: counter | gauge | histogram;
    ``labels``: upstream's label names in upstream's order; ``source``: ``file:line`` upstream."""

    name: str
    kind: str
    labels: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class NotExported:
    name: str
    source: str
    why: str


_MODEL = ("model_name", "target_model_name")
_REQ = (*_MODEL, "fairness_id", "priority")  # llm_d_router_metrics.go:34 modelLabelsWithFairnessPriority
_POOL = ("name",)


def _l(name: str, kind: str, line: int, labels: tuple[str, ...] = ()) -> Claim:
    return Claim(f"llm_d_epp_{name}", kind, labels, f"{LLMD_FILE}:{line}")


LLMD_CLAIMS: tuple[Claim, ...] = (
    _l("request_total", "counter", 43, _REQ),
    _l("request_error_total", "counter", 52, (*_REQ, "error_code")),
    _l("request_duration_seconds", "histogram", 61, _REQ),
    _l("request_size_bytes", "histogram", 71, _REQ),
    _l("response_size_bytes", "histogram", 85, _REQ),
    _l("request_input_tokens", "histogram", 95, _REQ),
    _l("request_output_tokens", "histogram", 105, _REQ),
    _l("request_cached_tokens", "histogram", 115, _REQ),
    _l("request_running", "gauge", 125, _REQ),
    _l("request_ntpot_seconds", "histogram", 134, _REQ),
    _l("request_ttft_seconds", "histogram", 146, (*_REQ, "streaming")),
    _l("request_streaming_tpot_seconds", "histogram", 159, _REQ),
    _l("request_streaming_itl_seconds", "histogram", 172, _REQ),
    _l("average_kv_cache_utilization", "gauge", 187, _POOL),
    _l("average_queue_size", "gauge", 196, _POOL),
    _l("average_running_requests", "gauge", 205, _POOL),
    _l("std_dev_kv_cache_utilization", "gauge", 214, _POOL),
    _l("std_dev_queue_size", "gauge", 223, _POOL),
    _l("std_dev_running_requests", "gauge", 232, _POOL),
    _l("ready_endpoints", "gauge", 241, _POOL),
    _l("scheduler_e2e_duration_seconds", "histogram", 253),
    _l(
        "scheduler_attempts_total",
        "counter",
        265,
        ("status", "target_model_name", "endpoint_name", "namespace", "port"),
    ),
    _l("request_processing_duration_seconds", "histogram", 286),
    _l("response_processing_duration_seconds", "histogram", 298),
    _l("info", "gauge", 312, ("commit", "build_ref")),
    _l("per_endpoint_queue_size", "gauge", 494, ("name", "model_server_endpoint")),
    Claim("llm_d_epp_extproc_streams_inflight", "gauge", (), "pkg/epp/metrics/grpc_stream_metrics.go:34"),
    Claim(
        "llm_d_epp_extproc_stream_duration_seconds",
        "histogram",
        (),
        "pkg/epp/metrics/grpc_stream_metrics.go:42",
    ),
    Claim(
        "llm_d_epp_extproc_streams_total", "counter", ("code",), "pkg/epp/metrics/grpc_stream_metrics.go:51"
    ),
)

_FLOW = "no flow-control layer of upstream's kind (its fairness queues, saturation detector and revocations); the picker's own queue is --flow-control, counted in smetric_epp_shed_total and smetric_epp_immediate_responses_total"
_PLUGINS = "pkg/epp/framework/plugins"
LLMD_NOT_EXPORTED: tuple[NotExported, ...] = (
    NotExported(
        "llm_d_epp_plugin_duration_seconds",
        f"{LLMD_FILE}:274",
        "no plugin chain: one policy decides (its time is llm_d_epp_scheduler_e2e_duration_seconds)",
    ),
    *(
        NotExported(f"llm_d_epp_flow_control_{n}", f"{LLMD_FILE}:{line}", _FLOW)
        for n, line in (
            ("request_queue_duration_seconds", 323),
            ("dispatch_cycle_duration_seconds", 335),
            ("request_enqueue_duration_seconds", 347),
            ("queue_size", 359),
            ("queue_bytes", 368),
            ("pool_saturation", 377),
            ("stale_endpoints", 391),
            ("requests_total", 405),
            ("revocations_issued_total", 414),
            ("revocations_total", 423),
            ("reclaim_target", 432),
            ("pending_reclaim", 441),
            ("revocation_confirmation_seconds", 450),
        )
    ),
    NotExported(
        "llm_d_epp_model_rewrite_decisions_total",
        f"{LLMD_FILE}:462",
        "no InferenceModelRewrite: the picker never rewrites a request's model",
    ),
    NotExported(
        "llm_d_epp_datalayer_poll_errors_total",
        f"{LLMD_FILE}:474",
        "no data-layer plugins: a failed /metrics scrape marks the endpoint stale (smetric_epp_stale_endpoints)",
    ),
    NotExported(
        "llm_d_epp_datalayer_extract_errors_total",
        f"{LLMD_FILE}:484",
        "no data-layer extractor plugins (the scraper's parse errors mark the endpoint stale)",
    ),
    *(
        NotExported(
            f"llm_d_epp_prefix_indexer_{n}",
            f"{_PLUGINS}/requestcontrol/dataproducer/approximateprefix/metrics.go:{line}",
            "upstream's approximate-prefix plugin's own index (bytes of prompt text per plugin "
            "instance); the picker's index counts token blocks and is no plugin",
        )
        for n, line in (("size", 43), ("hit_ratio", 62), ("hit_bytes", 82))
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/requestcontrol/dataproducer/inflightload/metrics.go:{line}",
            "the in-flight-load producer plugin's gauges (per producer instance, fairness id and "
            "priority); the picker's dispatch ledger is smetric_epp_endpoint_queued_prefill_seconds",
        )
        for n, line in (("inflight_requests", 35), ("inflight_tokens", 44))
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/scheduling/profilehandler/disagg/metrics.go:{line}",
            "labelled by the disagg profile-handler plugin instance; the picker's PD decisions "
            "are smetric_epp_decisions_total",
        )
        for n, line in (("pd_decision_total", 59), ("disagg_decision_total", 83))
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/requestcontrol/screener/disaggregatedsetrollout/metrics.go:{line}",
            "no DisaggregatedSet rollout screener",
        )
        for n, line in (
            ("disaggregatedset_strict_header_no_match_total", 36),
            ("disaggregatedset_revision_gating_share", 48),
        )
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/requestcontrol/dataproducer/multimodal/metrics.go:{line}",
            "no multimodal encoder cache",
        )
        for n, line in (
            ("encoder_cache_queries_total", 35),
            ("encoder_cache_hits_total", 47),
            ("encoder_cache_hit_ratio", 60),
        )
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/flowcontrol/fairness/program-aware/{f}:{line}",
            "no program-aware fairness policy",
        )
        for n, f, line in (
            ("program_aware_jains_fairness_index", "prometheus.go", 15),
            ("program_aware_avg_wait_time_milliseconds", "prometheus.go", 23),
            ("program_aware_attained_service_tokens", "strategy_las.go", 69),
        )
    ),
    *(
        NotExported(
            f"llm_d_epp_{n}",
            f"{_PLUGINS}/requestcontrol/dataproducer/predictedlatency/metrics.go:{line}",
            "the latency-predictor plugin's predictions and SLO checks; no latency predictor here",
        )
        for n, line in (
            ("inference_request_metric", 79),
            ("request_predicted_ttft_seconds", 108),
            ("request_ttft_prediction_duration_seconds", 128),
            ("request_predicted_tpot_seconds", 158),
            ("request_tpot_prediction_duration_seconds", 178),
            ("request_slo_violation_total", 197),
        )
    ),
)


def _g(name: str, kind: str, line: int, labels: tuple[str, ...], file: str = GIE_FILE) -> Claim:
    return Claim(name, kind, labels, f"{file}:{line}")


GIE_CLAIMS: tuple[Claim, ...] = (
    _g("inference_objective_request_total", "counter", 88, (*_MODEL, "priority")),
    _g("inference_objective_request_error_total", "counter", 97, (*_MODEL, "error_code")),
    _g("inference_objective_request_ttft_seconds", "histogram", 115, _MODEL),
    _g("inference_objective_request_tpot_seconds", "histogram", 145, _MODEL),
    _g("inference_objective_request_duration_seconds", "histogram", 184, _MODEL),
    _g("inference_objective_request_sizes", "histogram", 194, _MODEL),
    _g("inference_objective_response_sizes", "histogram", 209, _MODEL),
    _g("inference_objective_input_tokens", "histogram", 221, _MODEL),
    _g("inference_objective_output_tokens", "histogram", 232, _MODEL),
    _g("inference_objective_prompt_cached_tokens", "histogram", 243, _MODEL),
    _g("inference_objective_running_requests", "gauge", 254, ("model_name",)),
    _g("inference_objective_normalized_time_per_output_token_seconds", "histogram", 264, _MODEL),
    _g("inference_pool_average_kv_cache_utilization", "gauge", 280, _POOL),
    _g("inference_pool_average_queue_size", "gauge", 289, _POOL),
    _g("inference_pool_average_running_requests", "gauge", 298, _POOL),
    _g("inference_pool_ready_pods", "gauge", 307, _POOL),
    _g("inference_extension_scheduler_e2e_duration_seconds", "histogram", 319, ()),
    _g(
        "inference_extension_scheduler_attempts_total",
        "counter",
        331,
        ("status", "target_model_name", "pod_name", "namespace", "port"),
    ),
    _g("inference_extension_info", "gauge", 384, ("commit", "build_ref")),
    _g(
        "inference_pool_per_pod_queue_size",
        "gauge",
        29,
        ("name", "model_server_pod"),
        "pkg/epp/metrics/collectors/inference_pool.go",
    ),
)

_PREDICTOR = "the latency-predictor plugin's predictions and SLO checks; no latency predictor here"
GIE_NOT_EXPORTED: tuple[NotExported, ...] = (
    NotExported("inference_objective_inference_request_metric", f"{GIE_FILE}:106", _PREDICTOR),
    NotExported("inference_objective_request_predicted_ttft_seconds", f"{GIE_FILE}:125", _PREDICTOR),
    NotExported(
        "inference_objective_request_ttft_prediction_duration_seconds", f"{GIE_FILE}:135", _PREDICTOR
    ),
    NotExported("inference_objective_request_predicted_tpot_seconds", f"{GIE_FILE}:155", _PREDICTOR),
    NotExported(
        "inference_objective_request_tpot_prediction_duration_seconds", f"{GIE_FILE}:165", _PREDICTOR
    ),
    NotExported("inference_objective_request_slo_violation_total", f"{GIE_FILE}:175", _PREDICTOR),
    NotExported("inference_extension_plugin_duration_seconds", f"{GIE_FILE}:340", "no plugin chain"),
    *(
        NotExported(
            f"inference_extension_prefix_indexer_{n}",
            f"{GIE_FILE}:{line}",
            "upstream's own prefix-index plugin",
        )
        for n, line in (("size", 352), ("hit_ratio", 361), ("hit_bytes", 372))
    ),
    *(
        NotExported(
            f"inference_extension_flow_control_{n}",
            f"{GIE_FILE}:{line}",
            "no flow-control layer of upstream's kind",
        )
        for n, line in (
            ("request_queue_duration_seconds", 395),
            ("dispatch_cycle_duration_seconds", 407),
            ("request_enqueue_duration_seconds", 419),
            ("queue_size", 431),
            ("queue_bytes", 440),
            ("pool_saturation", 449),
        )
    ),
    NotExported(
        "inference_extension_model_rewrite_decisions_total", f"{GIE_FILE}:460", "no InferenceModelRewrite"
    ),
)

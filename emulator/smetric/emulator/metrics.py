"""vLLM-named Prometheus metrics of one emulated instance (one ``CollectorRegistry`` each).

Names, labels and histogram buckets follow vLLM's V1 ``PrometheusStatLogger``: every series has
the labels ``model_name`` and ``engine`` (the engine index, "0"); ``vllm:cache_config_info`` is a
constant-1 gauge whose labels carry the cache configuration. Latency histograms are in wall-clock
seconds as a client of this server observes them (so they already include ``--time-scale``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM's buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# vLLM's buckets for vllm:inter_token_latency_seconds.
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
# vLLM's request-latency buckets (vllm:e2e_request_latency_seconds).
E2E_BUCKETS_S: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ("model_name", "engine")


class InstanceMetrics:
    """The metric families one vLLM engine exports, bound to one model name and engine index."""

    def __init__(self, model_name: str, block_size: int, num_gpu_blocks: int, engine: str = "0") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name, "engine": engine}
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, _LABELS, registry=reg)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, _LABELS, registry=reg)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, _LABELS, buckets=buckets, registry=reg)

        running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.running = running.labels(**labels)
        waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.waiting = waiting.labels(**labels)
        usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.kv_usage = usage.labels(**labels)
        queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_queries = queries.labels(**labels)
        hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.prefix_hits = hits.labels(**labels)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(
            **labels
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(**labels)
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions.").labels(
            **labels
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*_LABELS, "finished_reason"),
            registry=reg,
        )
        self.success_length = success.labels(**labels, finished_reason="length")
        self.success_abort = success.labels(**labels, finished_reason="abort")
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS_S
        ).labels(**labels)
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S
        ).labels(**labels)
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS_S
        ).labels(**labels)
        cache_labels = {
            "block_size": str(block_size),
            "num_gpu_blocks": str(num_gpu_blocks),
            "enable_prefix_caching": "True",
            "prefix_caching_hash_algo": "sha256",
            "cache_dtype": "auto",
            "engine": engine,
        }
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            tuple(cache_labels),
            registry=reg,
        )
        info.labels(**cache_labels).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)

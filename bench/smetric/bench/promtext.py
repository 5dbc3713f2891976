"""Reading an engine's ``/metrics`` (Prometheus text, parsed with ``prometheus_client``'s parser).

Only vLLM's metric names are read, so the same code reads the emulator and a real vLLM engine.
Samples of one name are summed over label sets (engines / models behind one port).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"


class MetricsFormatError(ValueError):
    """The text is not Prometheus exposition format, or lacks vLLM's request gauges."""


@dataclass(frozen=True, slots=True)
class EngineScrape:
    running: float
    waiting: float
    kv_usage: float
    prefix_hits: float
    prefix_queries: float
    ttft_sum_s: float
    ttft_count: float


def sample_sums(text: str) -> dict[str, float]:
    """Sum of every sample value by sample name (``_total`` / ``_sum`` / ``_count`` kept)."""
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    except ValueError as exc:
        raise MetricsFormatError(f"not Prometheus text: {exc}") from exc
    return sums


def parse_engine_metrics(text: str) -> EngineScrape:
    sums = sample_sums(text)
    if RUNNING not in sums:
        raise MetricsFormatError(f"no {RUNNING} in the metrics (is this a vLLM engine?)")

    def get(name: str, default: float = 0.0) -> float:
        return sums.get(name, default)

    kv = next((sums[n] for n in KV_USAGE if n in sums), 0.0)
    return EngineScrape(
        running=get(RUNNING),
        waiting=get(WAITING),
        kv_usage=kv,
        prefix_hits=get(PREFIX_HITS),
        prefix_queries=get(PREFIX_QUERIES),
        ttft_sum_s=get(TTFT_SUM),
        ttft_count=get(TTFT_COUNT),
    )


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """Cluster-wide change of the engines' counters between two scrapes."""

    prefix_hits: float
    prefix_queries: float
    ttft_sum_s: float
    ttft_count: float

    @property
    def local_hit_ratio(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries > 0 else float("nan")

    @property
    def mean_server_ttft_s(self) -> float:
        return self.ttft_sum_s / self.ttft_count if self.ttft_count > 0 else float("nan")


def counter_delta(before: Mapping[str, EngineScrape], after: Mapping[str, EngineScrape]) -> CounterDelta:
    """Sum of per-instance differences; an instance missing from either side is left out.

    A counter that went down (the engine restarted) counts from zero, as Prometheus' ``increase`` does.
    """

    def inc(a: float, b: float) -> float:
        return b - a if b >= a else b

    keys = [k for k in after if k in before]
    return CounterDelta(
        prefix_hits=sum(inc(before[k].prefix_hits, after[k].prefix_hits) for k in keys),
        prefix_queries=sum(inc(before[k].prefix_queries, after[k].prefix_queries) for k in keys),
        ttft_sum_s=sum(inc(before[k].ttft_sum_s, after[k].ttft_sum_s) for k in keys),
        ttft_count=sum(inc(before[k].ttft_count, after[k].ttft_count) for k in keys),
    )

"""vLLM ``/metrics`` text -> :class:`~smetric.epp.contracts.EngineMetrics` (real Prometheus parsing).

Names read (all summed over the ``engine`` label -- one series per data-parallel engine -- and over
``model_name``):

* ``vllm:num_requests_running``, ``vllm:num_requests_waiting``
* ``vllm:kv_cache_usage_perc`` (0..1; older releases: ``vllm:gpu_cache_usage_perc``), averaged over
  engines weighted by their ``num_gpu_blocks`` (plain mean when capacities are unknown)
* ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (older releases:
  ``vllm:gpu_prefix_cache_queries_total`` / ``..._hits_total``)
* ``vllm:cache_config_info`` labels ``block_size``, ``num_gpu_blocks`` (capacity in tokens is
  ``sum(num_gpu_blocks) * block_size``) and ``prefix_caching_hash_algo``.

A text without ``vllm:num_requests_running`` is not a vLLM engine: :class:`MetricsParseError`.
So is a page with a NaN, infinite or negative value in one of the series read (issue 12: a NaN
used to raise in ``round`` and log a traceback every scrape): the page is refused as a whole, the
last good metrics stay and age into staleness, and the scraper logs the failure once.

Only the lines of the series read reach the Prometheus parser (:func:`wanted_lines`): an engine
page also carries histograms and other series the picker never reads, and parsing them all costs
the event loop time for nothing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from smetric.epp.contracts import EngineMetrics

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
CACHE_INFO = "vllm:cache_config_info"

_WANTED = frozenset({RUNNING, WAITING, *KV_USAGE, *QUERIES, *HITS, CACHE_INFO})


class MetricsParseError(ValueError):
    """The scraped text is not Prometheus text from a vLLM engine."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """What ``vllm:cache_config_info`` says about the engine's KV cache."""

    block_size: int = 0
    num_gpu_blocks: int = 0
    hash_algo: str = ""


@dataclass(frozen=True, slots=True)
class ParsedMetrics:
    metrics: EngineMetrics
    cache: CacheConfig


def _int_label(labels: dict[str, str], name: str) -> int:
    try:
        return max(0, int(float(labels.get(name, "0") or "0")))
    except (ValueError, OverflowError):  # NaN, inf, garbage
        return 0


def wanted_lines(text: str) -> str:
    """The sample lines of the series in ``_WANTED`` (comments and other series dropped)."""
    keep = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if i != -1 and i < end:
                end = i
        if line[:end] in _WANTED:
            keep.append(line)
    keep.append("")
    return "\n".join(keep)


def _check_value(name: str, value: float) -> None:
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise MetricsParseError(f"{name} is {value!r} (NaN, infinite or negative): page refused")


def parse_vllm_metrics(text: str, scraped_at_s: float) -> ParsedMetrics:
    sums: dict[str, float] = defaultdict(float)
    usage_by_engine: dict[str, float] = {}
    blocks_by_engine: dict[str, int] = {}
    block_size = 0
    hash_algo = ""
    seen: set[str] = set()
    try:
        families = list(text_string_to_metric_families(wanted_lines(text)))
    except (ValueError, IndexError, TypeError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}") from exc
    for family in families:
        for sample in family.samples:
            name = sample.name
            if name not in _WANTED:
                continue
            seen.add(name)
            if name != CACHE_INFO:
                _check_value(name, sample.value)
            engine = sample.labels.get("engine", "")
            if name == CACHE_INFO:
                block_size = block_size or _int_label(sample.labels, "block_size")
                blocks_by_engine[engine] = _int_label(sample.labels, "num_gpu_blocks")
                hash_algo = hash_algo or sample.labels.get("prefix_caching_hash_algo", "")
            elif name in KV_USAGE:
                if KV_USAGE[0] in seen and name != KV_USAGE[0]:
                    continue  # prefer the current name when an engine exports both
                usage_by_engine[engine] = sample.value
            else:
                sums[name] += sample.value
    if RUNNING not in seen:
        raise MetricsParseError(f"no {RUNNING} in the scraped text")
    total_blocks = sum(blocks_by_engine.values())
    if usage_by_engine and total_blocks:
        kv_usage = sum(u * blocks_by_engine.get(e, 0) for e, u in usage_by_engine.items()) / total_blocks
    elif usage_by_engine:
        kv_usage = sum(usage_by_engine.values()) / len(usage_by_engine)
    else:
        kv_usage = 0.0
    metrics = EngineMetrics(
        running=round(sums[RUNNING]),
        waiting=round(sums[WAITING]),
        kv_usage=min(max(kv_usage, 0.0), 1.0),
        kv_capacity_tokens=total_blocks * block_size,
        block_size=block_size,
        prefix_cache_queries=sums[QUERIES[0]] + sums[QUERIES[1]],
        prefix_cache_hits=sums[HITS[0]] + sums[HITS[1]],
        scraped_at_s=scraped_at_s,
    )
    return ParsedMetrics(metrics, CacheConfig(block_size, total_blocks, hash_algo))

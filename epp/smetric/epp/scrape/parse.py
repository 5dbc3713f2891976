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
So is a page with a NaN, infinite or negative value in one of the series read (``round`` of a NaN raises): the page is refused as a whole, the
last good metrics stay and age into staleness, and the scraper logs the failure once.

Only the lines of the series read reach the Prometheus parser (:func:`wanted_lines`): an engine
page also carries histograms and other series the picker never reads, and parsing them all costs
the event loop time for nothing.
"""

from __future__ import annotations

import re
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
# A sample line of a wanted series: its name at the start of a line, then labels or blanks (one C
# pass over the page, where a Python loop over a real engine's ~2,000 lines took most of a scrape).
_WANTED_LINE = re.compile(
    rb"^(?:" + b"|".join(re.escape(n.encode()) for n in sorted(_WANTED)) + rb")(?=[{ \t])[^\n]*", re.M
)


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


Sample = tuple[str, dict[str, str], float]  # name, labels, value
# A line's samples by its bytes: what the scraper keeps of one endpoint's last page, so a line
# that did not change since the last scrape (cache_config_info, an idle engine's gauges) is not
# parsed again. Bounded: replaced by each page's lines.
LineMemo = dict[bytes, tuple[Sample, ...]]


def _wanted(page: str | bytes) -> list[bytes]:
    data = page.encode("utf-8") if isinstance(page, str) else page
    return [line.rstrip(b"\r") for line in _WANTED_LINE.findall(data)]


def wanted_lines(text: str | bytes) -> str:
    """The sample lines of the series in ``_WANTED`` (comments and other series dropped)."""
    lines = _wanted(text)
    lines.append(b"")
    return b"\n".join(lines).decode("utf-8")


def _parse(text: str) -> tuple[Sample, ...]:
    try:
        return tuple(
            (s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
        )
    except (ValueError, IndexError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise MetricsParseError(f"not Prometheus text: {exc}") from exc


def _samples(text: str | bytes, memo: LineMemo | None) -> list[Sample]:
    """The wanted lines' samples, by the Prometheus parser; with ``memo``, line by line, reusing
    the samples of lines seen on the previous page (``memo`` then holds this page's lines)."""
    if memo is None:
        return list(_parse(wanted_lines(text)))
    out: list[Sample] = []
    fresh: LineMemo = {}
    for line in _wanted(text):
        samples = memo.get(line)
        if samples is None:
            try:
                samples = _parse(line.decode("utf-8") + "\n")
            except UnicodeDecodeError as exc:
                raise MetricsParseError(f"not Prometheus text: {exc}") from exc
        fresh[line] = samples
        out.extend(samples)
    memo.clear()
    memo.update(fresh)
    return out


def _check_value(name: str, value: float) -> None:
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise MetricsParseError(f"{name} is {value!r} (NaN, infinite or negative): page refused")


def parse_vllm_metrics(text: str | bytes, scraped_at_s: float, memo: LineMemo | None = None) -> ParsedMetrics:
    """One engine page -> its metrics (``memo``: see :data:`LineMemo`; a refused page leaves it
    unchanged)."""
    sums: dict[str, float] = defaultdict(float)
    usage_by_engine: dict[str, float] = {}
    blocks_by_engine: dict[str, int] = {}
    block_size = 0
    hash_algo = ""
    seen: set[str] = set()
    scratch: LineMemo | None = None if memo is None else dict(memo)
    for name, labels, value in _samples(text, scratch):
        if name not in _WANTED:
            continue
        seen.add(name)
        if name != CACHE_INFO:
            _check_value(name, value)
        engine = labels.get("engine", "")
        if name == CACHE_INFO:
            block_size = block_size or _int_label(labels, "block_size")
            blocks_by_engine[engine] = _int_label(labels, "num_gpu_blocks")
            hash_algo = hash_algo or labels.get("prefix_caching_hash_algo", "")
        elif name in KV_USAGE:
            if KV_USAGE[0] in seen and name != KV_USAGE[0]:
                continue  # prefer the current name when an engine exports both
            usage_by_engine[engine] = value
        else:
            sums[name] += value
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
    if memo is not None and scratch is not None:  # the page was accepted: remember its lines
        memo.clear()
        memo.update(scratch)
    return ParsedMetrics(metrics, CacheConfig(block_size, total_blocks, hash_algo))

"""Per-policy summary of one replay.

Units: latencies are reported in *model* seconds (wall seconds / time scale), so they compare with
the simulator and with the paper's SLOs; the router overhead is also given in wall milliseconds,
because Envoy, the picker and the client run at real speed and are not scaled. SLOs are checked in
model time: TTFT SLO = ``b + a * L`` with L the prompt tokens the server counted (the scaled prompt),
TPOT SLO per preset. TPS counts (scaled) output tokens per model second.

Load imbalance: ``vllm:num_requests_running`` of every instance sampled every 0.5 s; in each window
(30 model seconds by default) the mean running count per instance; the window's imbalance is
max / mean over instances; windows with no running request are skipped; reported as the mean and
the maximum over windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from smetric.bench.promtext import CounterDelta
from smetric.bench.replay import RequestRecord
from smetric.bench.sampler import LoadSample
from smetric.core.slo import SloConfig


@dataclass(frozen=True, slots=True)
class Summary:
    n_sent: int
    n_ok: int
    n_failed: int
    n_not_sent: int
    model_duration_s: float
    tps_within_slo: float
    tps_total: float
    slo_attainment: float
    ttft_slo_attainment: float
    tpot_slo_attainment: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    local_hit_ratio: float  # engines' prefix-cache hits / queries over the replay
    usage_hit_ratio: float  # sum of usage.cached_tokens / prompt tokens (client side cross-check)
    imbalance_mean: float
    imbalance_max: float
    engine_ttft_mean_s: (
        float  # the engines' own TTFT histogram mean (model s): routing quality without router cost
    )
    router_overhead_ms: float  # mean client TTFT - mean engine TTFT, wall milliseconds
    router_share_of_e2e: float  # that overhead / mean client end-to-end latency
    engine_unfinished_at_end: float = float("nan")  # running + waiting on the engines after the replay
    # The same two numbers with the row's mean router overhead counted at real speed instead of
    # x 1/time_scale (an approximation: every request is charged the mean); see docs/bench.md.
    tps_within_slo_router_unscaled: float = float("nan")
    slo_attainment_router_unscaled: float = float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


def meets_slo(
    record: RequestRecord, slo: SloConfig, time_scale: float, router_wall_s: float = 0.0
) -> tuple[bool, bool]:
    """(TTFT within SLO, TPOT within SLO) in model time; a failed request meets neither.

    ``router_wall_s`` > 0 counts that much of the TTFT at real speed (not divided by the time scale).
    """
    o = record.outcome
    if not o.ok:
        return False, False
    r = min(max(router_wall_s, 0.0), o.ttft_s)
    ttft_model = (o.ttft_s - r) / time_scale + r
    ttft_ok = ttft_model <= slo.ttft_slo_s(record.prompt_tokens)
    tpot_ok = record.tpot_s / time_scale <= slo.tpot_s
    return ttft_ok, tpot_ok


def load_imbalance(samples: Sequence[LoadSample], window_s: float) -> tuple[float, float]:
    """(mean, max) over windows of max/mean running requests per instance; NaN without load."""
    if not samples or window_s <= 0:
        return float("nan"), float("nan")
    ratios: list[float] = []
    buckets: dict[int, list[tuple[float, ...]]] = {}
    for s in samples:
        buckets.setdefault(int(s.t_s // window_s), []).append(s.running)
    for rows in buckets.values():
        arr = np.asarray(rows, dtype=np.float64)
        if np.isnan(arr).all():
            continue
        per_instance = np.nanmean(arr, axis=0) if arr.shape[0] > 1 else arr[0]
        per_instance = per_instance[~np.isnan(per_instance)]
        mean = float(per_instance.mean()) if per_instance.size else 0.0
        if mean > 0:
            ratios.append(float(per_instance.max()) / mean)
    if not ratios:
        return float("nan"), float("nan")
    return float(np.mean(ratios)), float(np.max(ratios))


def summarise(
    records: Sequence[RequestRecord],
    not_sent: int,
    slo: SloConfig,
    time_scale: float,
    samples: Sequence[LoadSample],
    counters: CounterDelta | None,
    window_model_s: float = 30.0,
    engine_unfinished_at_end: float = float("nan"),
) -> Summary:
    ok = [r for r in records if r.outcome.ok]
    if records:
        start = min(r.sent_s for r in records)
        end = max(r.sent_s + (r.outcome.e2e_s if r.outcome.ok else 0.0) for r in records)
        model_s = max(end - start, 1e-9) / time_scale
    else:
        model_s = float("nan")
    flags = [meets_slo(r, slo, time_scale) for r in records]
    both = [r for r, (a, b) in zip(records, flags, strict=True) if a and b]
    n = len(records)

    def frac(k: int) -> float:
        return k / n if n else float("nan")

    ttft_model = [r.outcome.ttft_s / time_scale for r in ok]
    tpot_model = [r.tpot_s / time_scale for r in ok if r.outcome.output_tokens >= 2]
    e2e_model = [r.outcome.e2e_s / time_scale for r in ok]
    with_usage = [r for r in ok if r.outcome.cached_tokens >= 0 and r.prompt_tokens > 0]
    usage_hit = (
        sum(r.outcome.cached_tokens for r in with_usage) / sum(r.prompt_tokens for r in with_usage)
        if with_usage
        else float("nan")
    )
    overhead_ms = share = float("nan")
    if counters is not None and ok and counters.ttft_count > 0:
        client_ttft = float(np.mean([r.outcome.ttft_s for r in ok]))
        overhead = client_ttft - counters.mean_server_ttft_s
        overhead_ms = overhead * 1000.0
        share = overhead / float(np.mean([r.outcome.e2e_s for r in ok]))
    imb_mean, imb_max = load_imbalance(samples, window_model_s * time_scale)
    tps_unscaled = att_unscaled = float("nan")
    if not math.isnan(overhead_ms) and n:
        flags_u = [meets_slo(r, slo, time_scale, overhead_ms / 1000.0) for r in records]
        both_u = [r for r, (a, b) in zip(records, flags_u, strict=True) if a and b]
        tps_unscaled = sum(r.outcome.output_tokens for r in both_u) / model_s
        att_unscaled = len(both_u) / n
    return Summary(
        n_sent=n,
        n_ok=len(ok),
        n_failed=n - len(ok),
        n_not_sent=not_sent,
        model_duration_s=model_s,
        tps_within_slo=sum(r.outcome.output_tokens for r in both) / model_s if n else float("nan"),
        tps_total=sum(r.outcome.output_tokens for r in ok) / model_s if n else float("nan"),
        slo_attainment=frac(len(both)),
        ttft_slo_attainment=frac(sum(1 for a, _ in flags if a)),
        tpot_slo_attainment=frac(sum(1 for _, b in flags if b)),
        ttft_p50_s=percentile(ttft_model, 50),
        ttft_p90_s=percentile(ttft_model, 90),
        ttft_p99_s=percentile(ttft_model, 99),
        tpot_p50_s=percentile(tpot_model, 50),
        tpot_p90_s=percentile(tpot_model, 90),
        e2e_p50_s=percentile(e2e_model, 50),
        e2e_p90_s=percentile(e2e_model, 90),
        local_hit_ratio=counters.local_hit_ratio if counters is not None else float("nan"),
        usage_hit_ratio=usage_hit,
        imbalance_mean=imb_mean,
        imbalance_max=imb_max,
        engine_ttft_mean_s=counters.mean_server_ttft_s / time_scale if counters is not None else float("nan"),
        router_overhead_ms=overhead_ms,
        router_share_of_e2e=share,
        engine_unfinished_at_end=engine_unfinished_at_end,
        tps_within_slo_router_unscaled=tps_unscaled,
        slo_attainment_router_unscaled=att_unscaled,
    )

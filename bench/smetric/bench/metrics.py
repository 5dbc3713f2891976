"""Per-policy summary of one replay.

Time accounting (``meta.time_accounting`` in the JSON; docs/bench.md): the emulated engines run
``1 / time_scale`` times too fast, the client, Envoy, the picker and vllm-router at real speed.

* ``split`` (the headline columns): per request, the engine's part of the latency is counted at
  model speed and everything else -- client, router, network, the emulator's own HTTP/tokenizer/
  event-loop time -- in wall seconds, unscaled: ``TTFT = E + (client_ttft - E * time_scale)`` with
  E the emulator's modelled engine TTFT (model seconds, from the engine's arrival of the request to
  its first token), the same for the decode span (TPOT). This is the latency a user would see if
  the engines ran at the modelled speed and the router at the speed measured here. A server that
  reports only wall times (``server_ttft / time_scale`` is used as E) or none (``all_scaled``)
  falls back.
* ``all_scaled``: the client's wall latency / time scale (the router's cost magnified
  ``1 / time_scale`` times), kept as ``*_all_scaled`` columns for comparison.

SLOs are checked in model time: TTFT SLO = ``b + a * L`` with L the prompt tokens the server counted
(the scaled prompt), TPOT SLO per preset. TPS counts (scaled) output tokens per model second.
With a cost-preserving token scale (``token_cost_scale = k > 1``: each token stands for ``k``
modelled tokens and the emulator charges time as for them, smetric.engine.roofline) L, the output
tokens and TPS are counted in modelled tokens (``k`` x the scaled counts) and TPOT per modelled
token (the time of one scaled token / ``k``).

Arrival drift (the simulator's definition, :func:`smetric.sim.metrics.arrival_drift`): requests
sent per model second in the first and the last quarter of the measurement window, ``end / start -
1``; ``arrival_drift_ok`` = ``|drift| <= 10 %`` (a run outside it did not see a steady offered
load). Only requests sent in the window (after the warm-up) are summarised.

Load imbalance: ``vllm:num_requests_running`` of every instance sampled every 0.5 s; in each window
(30 model seconds by default) the mean running count per instance; the window's imbalance is
max / mean over instances; windows with no running request are skipped; reported as the mean and
the maximum over windows.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from smetric.bench.promtext import CounterDelta
from smetric.bench.replay import RequestRecord
from smetric.bench.sampler import LoadSample
from smetric.core.slo import SloConfig
from smetric.sim.metrics import arrival_drift


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
    # the engines' own mean TTFT (model s): routing quality without router cost; the modelled
    # engine TTFT the emulator reports per request, else its TTFT histogram mean / time scale
    engine_ttft_mean_s: float
    router_overhead_ms: float  # mean (client TTFT - server TTFT) per request, wall milliseconds
    router_share_of_e2e: float  # that overhead / mean client end-to-end latency
    engine_unfinished_at_end: float = float("nan")  # running + waiting on the engines after the replay
    # The same figures with the whole client latency divided by the time scale (router cost
    # magnified 1/time_scale times): the "all_scaled" time accounting.
    tps_within_slo_all_scaled: float = float("nan")
    slo_attainment_all_scaled: float = float("nan")
    ttft_p50_all_scaled_s: float = float("nan")
    ttft_p90_all_scaled_s: float = float("nan")
    n_server_timed: int = 0  # requests whose engine time the server reported (split accounting)
    # mean (server wall TTFT - modelled engine TTFT x time scale) per request, wall ms: the
    # emulator's own HTTP, tokenizer and event-loop time (counted unscaled in the split accounting)
    emulator_overhead_ms: float = float("nan")
    # requests sent per model second in the first / last quarter of the measurement window, their
    # ratio - 1, and whether |drift| is within the simulator's bound (MAX_ARRIVAL_DRIFT)
    arrival_rate_start_per_s: float = float("nan")
    arrival_rate_end_per_s: float = float("nan")
    arrival_drift: float = float("nan")
    arrival_drift_ok: bool = False
    # CPU per request sent (warm-up included) over the replay, wall milliseconds of CPU time: the
    # router (Envoy + pickers, or vllm-router), the client (the bench's own process) and the emulated
    # engines; and all of it over (replay wall seconds x cores) -- 1.0 = the box was saturated
    # (smetric.bench.cpu)
    cpu_router_ms: float = float("nan")
    cpu_client_ms: float = float("nan")
    cpu_engines_ms: float = float("nan")
    cpu_box_share: float = float("nan")
    # flow control (the pickers' 429 + Retry-After; the clients resend, at most 8 times): the
    # window's requests refused at least once, and those whose last answer was still a 429 (given up)
    shed_share: float = float("nan")
    gave_up_share: float = float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


Accounting = Literal["split", "all_scaled"]


def model_latency(
    record: RequestRecord, time_scale: float, accounting: Accounting = "split"
) -> tuple[float, float, float]:
    """(TTFT, TPOT, e2e) of one finished request in model seconds under ``accounting``.

    ``split``: the engine's part at model speed, every other wall second (client, router, network,
    the emulator's own HTTP/tokenizer/event-loop time) unscaled. The engine's part is the
    emulator's modelled engine time when it reports it, else its wall time / time scale; without
    server timing the request is counted ``all_scaled``. Unscaled remainders are clamped at >= 0.
    """
    o = record.outcome
    n = o.output_tokens
    c_ttft, c_decode = o.ttft_s, max(o.e2e_s - o.ttft_s, 0.0)
    if accounting == "split" and not (math.isnan(o.engine_ttft_model_s) or math.isnan(o.engine_e2e_model_s)):
        e_ttft = o.engine_ttft_model_s
        e_decode = max(o.engine_e2e_model_s - e_ttft, 0.0)
        ttft = e_ttft + max(c_ttft - e_ttft * time_scale, 0.0)
        decode = e_decode + max(c_decode - e_decode * time_scale, 0.0)
    elif accounting == "split" and not (math.isnan(o.server_ttft_s) or math.isnan(o.server_e2e_s)):
        s_ttft = min(o.server_ttft_s, c_ttft)
        s_decode = min(max(o.server_e2e_s - o.server_ttft_s, 0.0), c_decode)
        ttft = s_ttft / time_scale + (c_ttft - s_ttft)
        decode = s_decode / time_scale + (c_decode - s_decode)
    else:
        ttft, decode = c_ttft / time_scale, c_decode / time_scale
    tpot = decode / (n - 1) if n >= 2 else 0.0
    return ttft, tpot, ttft + decode


def meets_slo(
    record: RequestRecord, slo: SloConfig, time_scale: float, accounting: Accounting = "split"
) -> tuple[bool, bool]:
    """(TTFT within SLO, TPOT within SLO) in model time; a failed request meets neither. With a
    cost-preserving token scale ``k`` pass ``slo.token_scaled(k)`` (module docstring)."""
    if not record.outcome.ok:
        return False, False
    ttft, tpot, _ = model_latency(record, time_scale, accounting)
    return ttft <= slo.ttft_slo_s(record.prompt_tokens), tpot <= slo.tpot_s


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
        with warnings.catch_warnings():  # an instance whose every scrape failed in the window: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            per_instance = np.nanmean(arr, axis=0) if arr.shape[0] > 1 else arr[0]
        per_instance = per_instance[~np.isnan(per_instance)]
        mean = float(per_instance.mean()) if per_instance.size else 0.0
        if mean > 0:
            ratios.append(float(per_instance.max()) / mean)
    if not ratios:
        return float("nan"), float("nan")
    return float(np.mean(ratios)), float(np.max(ratios))


def in_window(
    records: Sequence[RequestRecord], time_scale: float, measured_s: tuple[float, float] | None
) -> tuple[Sequence[RequestRecord], tuple[float, float, float, bool]]:
    """The records sent in the measurement window (all without one) and their arrival drift
    (:func:`smetric.sim.metrics.arrival_drift`; NaN and not ok without a window)."""
    if measured_s is None:
        return records, (math.nan, math.nan, math.nan, False)
    lo, hi = measured_s
    kept = [r for r in records if r.sent_s / time_scale >= lo]
    return kept, arrival_drift([r.sent_s / time_scale for r in kept], lo, hi)


def model_duration_s(records: Sequence[RequestRecord], time_scale: float) -> float:
    """Model seconds from the first request sent to the last one finished (NaN without records)."""
    if not records:
        return float("nan")
    start = min(r.sent_s for r in records)
    end = max(r.sent_s + (r.outcome.e2e_s if r.outcome.ok else 0.0) for r in records)
    return max(end - start, 1e-9) / time_scale


def within_slo(
    records: Sequence[RequestRecord],
    scaled_slo: SloConfig,
    time_scale: float,
    accounting: Accounting,
    token_cost_scale: float,
    model_s: float,
) -> tuple[list[tuple[bool, bool]], float, float]:
    """Per record (TTFT met, TPOT met) under ``accounting``; the output tokens per model second of
    the records that met both; the fraction that met both (NaN without records)."""
    n = len(records)
    if not n:
        return [], float("nan"), float("nan")
    flags = [meets_slo(r, scaled_slo, time_scale, accounting) for r in records]
    met = [r for r, (a, b) in zip(records, flags, strict=True) if a and b]
    tokens = token_cost_scale * sum(r.outcome.output_tokens for r in met)
    return flags, tokens / model_s, len(met) / n


def usage_hit_ratio(ok: Sequence[RequestRecord]) -> float:
    """Cached prompt tokens / prompt tokens over the requests whose usage reports a cache count."""
    with_usage = [r for r in ok if r.outcome.cached_tokens >= 0 and r.prompt_tokens > 0]
    if not with_usage:
        return float("nan")
    return sum(r.outcome.cached_tokens for r in with_usage) / sum(r.prompt_tokens for r in with_usage)


def router_overhead(
    ok: Sequence[RequestRecord], timed: Sequence[RequestRecord], counters: CounterDelta | None
) -> tuple[float, float]:
    """(mean client TTFT minus server TTFT in ms, its share of the mean E2E): per request where the
    server reports timing fields (``timed``), else from the server's TTFT counters; NaN without."""
    if timed:
        overhead = float(np.mean([max(r.outcome.ttft_s - r.outcome.server_ttft_s, 0.0) for r in timed]))
        return overhead * 1000.0, overhead / float(np.mean([r.outcome.e2e_s for r in timed]))
    if counters is not None and ok and counters.ttft_count > 0:  # a server without timing fields
        overhead = float(np.mean([r.outcome.ttft_s for r in ok])) - counters.mean_server_ttft_s
        return overhead * 1000.0, overhead / float(np.mean([r.outcome.e2e_s for r in ok]))
    return float("nan"), float("nan")


def emulator_overhead_ms(modelled: Sequence[RequestRecord], time_scale: float) -> float:
    """Mean server TTFT beyond the modelled engine TTFT (wall ms): the emulator's own time."""
    if not modelled:
        return float("nan")
    return 1000.0 * float(
        np.mean([r.outcome.server_ttft_s - r.outcome.engine_ttft_model_s * time_scale for r in modelled])
    )


def summarise(
    records: Sequence[RequestRecord],
    not_sent: int,
    slo: SloConfig,
    time_scale: float,
    samples: Sequence[LoadSample],
    counters: CounterDelta | None,
    window_model_s: float = 30.0,
    engine_unfinished_at_end: float = float("nan"),
    token_cost_scale: float = 1.0,
    measured_s: tuple[float, float] | None = None,
) -> Summary:
    """Summary of ``records`` (those sent before ``measured_s[0]``, the warm-up, are left out); the
    arrival drift is measured over ``measured_s`` (model seconds since the replay's start; None: no
    drift, NaN)."""
    records, drift = in_window(records, time_scale, measured_s)
    k = token_cost_scale
    ok = [r for r in records if r.outcome.ok]
    model_s = model_duration_s(records, time_scale)
    n = len(records)

    def frac(k: int) -> float:
        return k / n if n else float("nan")

    scaled_slo = slo.token_scaled(k)
    flags, tps_split, att_split = within_slo(records, scaled_slo, time_scale, "split", k, model_s)
    _, tps_all, att_all = within_slo(records, scaled_slo, time_scale, "all_scaled", k, model_s)
    lat = [model_latency(r, time_scale, "split") for r in ok]
    ttft_all = [r.outcome.ttft_s / time_scale for r in ok]
    ttft_model = [t for t, _, _ in lat]
    tpot_model = [p / k for (_, p, _), r in zip(lat, ok, strict=True) if r.outcome.output_tokens >= 2]
    e2e_model = [e for _, _, e in lat]
    timed = [r for r in ok if not math.isnan(r.outcome.server_ttft_s)]
    overhead_ms, share = router_overhead(ok, timed, counters)
    modelled = [r for r in timed if not math.isnan(r.outcome.engine_ttft_model_s)]
    imb_mean, imb_max = load_imbalance(samples, window_model_s * time_scale)
    return Summary(
        n_sent=n,
        n_ok=len(ok),
        n_failed=n - len(ok),
        n_not_sent=not_sent,
        model_duration_s=model_s,
        tps_within_slo=tps_split,
        tps_total=k * sum(r.outcome.output_tokens for r in ok) / model_s if n else float("nan"),
        slo_attainment=att_split,
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
        usage_hit_ratio=usage_hit_ratio(ok),
        imbalance_mean=imb_mean,
        imbalance_max=imb_max,
        engine_ttft_mean_s=float(np.mean([r.outcome.engine_ttft_model_s for r in modelled]))
        if modelled
        else (counters.mean_server_ttft_s / time_scale if counters is not None else float("nan")),
        router_overhead_ms=overhead_ms,
        router_share_of_e2e=share,
        engine_unfinished_at_end=engine_unfinished_at_end,
        tps_within_slo_all_scaled=tps_all,
        slo_attainment_all_scaled=att_all,
        ttft_p50_all_scaled_s=percentile(ttft_all, 50),
        ttft_p90_all_scaled_s=percentile(ttft_all, 90),
        n_server_timed=len(timed),
        shed_share=frac(sum(1 for r in records if r.outcome.retries_429 > 0 or r.outcome.status == 429)),
        gave_up_share=frac(sum(1 for r in records if r.outcome.status == 429)),
        emulator_overhead_ms=emulator_overhead_ms(modelled, time_scale),
        arrival_rate_start_per_s=drift[0],
        arrival_rate_end_per_s=drift[1],
        arrival_drift=drift[2],
        arrival_drift_ok=drift[3],
    )

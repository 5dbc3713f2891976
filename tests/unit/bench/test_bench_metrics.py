"""Metric computation: SLO checks in model time, TPS within SLO, percentiles, hit ratio, imbalance."""

from __future__ import annotations

import math

import pytest

from smetric.bench.metrics import load_imbalance, meets_slo, model_latency, summarise
from smetric.bench.promtext import MetricsFormatError, counter_delta, parse_engine_metrics
from smetric.bench.replay import Outcome, RequestRecord
from smetric.bench.sampler import LoadSample
from smetric.core.slo import SloConfig

SLO = SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0625, tpot_s=0.020)
TS = 0.1


def rec(ttft_s: float, e2e_s: float, out: int, prompt: int = 1000, ok: bool = True, sent_s: float = 0.0,
        cached: int = -1) -> RequestRecord:  # fmt: skip
    outcome = Outcome(ok=ok, status=200 if ok else 503, ttft_s=ttft_s, e2e_s=e2e_s, output_tokens=out,
                      prompt_tokens=prompt, cached_tokens=cached)  # fmt: skip
    return RequestRecord("s", "f", 0, sent_s, sent_s, prompt, out, outcome)


def test_slo_checked_in_model_time() -> None:
    # prompt 2000 -> TTFT SLO 1.125 model s = 0.1125 wall s at TS 0.1; TPOT 20 ms model = 2 ms wall
    good = rec(ttft_s=0.11, e2e_s=0.11 + 9 * 0.0019, out=10, prompt=2000)
    slow_first = rec(ttft_s=0.12, e2e_s=0.12 + 9 * 0.0019, out=10, prompt=2000)
    slow_decode = rec(ttft_s=0.05, e2e_s=0.05 + 9 * 0.0021, out=10, prompt=2000)
    assert meets_slo(good, SLO, TS) == (True, True)
    assert meets_slo(slow_first, SLO, TS) == (False, True)
    assert meets_slo(slow_decode, SLO, TS) == (True, False)
    assert meets_slo(rec(0.0, 0.0, 0, ok=False), SLO, TS) == (False, False)


def test_summary_counts_only_in_slo_tokens() -> None:
    records = [
        rec(0.05, 0.05 + 99 * 0.001, 100, sent_s=0.0, cached=500),  # meets both
        rec(0.50, 0.50 + 99 * 0.001, 100, sent_s=0.5, cached=0),  # TTFT miss (SLO 0.10625 wall)
        rec(0.0, 0.0, 0, ok=False, sent_s=1.0),
    ]
    s = summarise(records, not_sent=3, slo=SLO, time_scale=TS, samples=[], counters=None)
    duration_model = (0.5 + 0.50 + 0.099) / TS
    assert s.model_duration_s == pytest.approx(duration_model)
    assert s.tps_within_slo == pytest.approx(100 / duration_model)
    assert s.tps_total == pytest.approx(200 / duration_model)
    assert s.slo_attainment == pytest.approx(1 / 3)
    assert (s.n_sent, s.n_ok, s.n_failed, s.n_not_sent) == (3, 2, 1, 3)
    assert s.ttft_p50_s == pytest.approx((0.5 + 5.0) / 2)
    assert s.tpot_p50_s == pytest.approx(0.01)
    assert s.usage_hit_ratio == pytest.approx(500 / 2000)
    assert math.isnan(s.local_hit_ratio) and math.isnan(s.imbalance_mean)


def test_load_imbalance_over_windows() -> None:
    samples = [
        LoadSample(0.0, (4.0, 0.0)),
        LoadSample(0.5, (4.0, 0.0)),  # window 0: means (4, 0) -> 4 / 2 = 2
        LoadSample(1.0, (1.0, 1.0)),  # window 1: balanced -> 1
        LoadSample(2.0, (0.0, 0.0)),  # window 2: idle, skipped
        LoadSample(3.0, (float("nan"), 2.0)),  # failed scrape ignored -> 1
    ]
    mean, worst = load_imbalance(samples, window_s=1.0)
    assert worst == pytest.approx(2.0)
    assert mean == pytest.approx((2.0 + 1.0 + 1.0) / 3)
    assert all(math.isnan(v) for v in load_imbalance([], 1.0))


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %(q)s
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %(h)s
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} %(c)s
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} %(c)s
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} %(c)s
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} %(s)s
"""


def test_parse_engine_metrics_and_counter_delta() -> None:
    before = parse_engine_metrics(METRICS % {"q": 1000, "h": 200, "c": 2, "s": 0.5})
    after = parse_engine_metrics(METRICS % {"q": 3000, "h": 1400, "c": 6, "s": 1.3})
    assert (before.running, before.waiting, before.kv_usage) == (3.0, 1.0, 0.25)
    delta = counter_delta({"a": before}, {"a": after, "b": after})  # "b" has no baseline: left out
    assert delta.local_hit_ratio == pytest.approx(1200 / 2000)
    assert delta.mean_server_ttft_s == pytest.approx(0.8 / 4)
    restarted = counter_delta({"a": after}, {"a": before})  # counters reset: counted from zero
    assert restarted.prefix_queries == 1000


def test_router_overhead_from_engine_ttft() -> None:
    before = parse_engine_metrics(METRICS % {"q": 0, "h": 0, "c": 0, "s": 0})
    after = parse_engine_metrics(METRICS % {"q": 10, "h": 5, "c": 2, "s": 0.08})  # engine mean 40 ms
    records = [rec(0.05, 0.1, 10), rec(0.05, 0.1, 10)]
    s = summarise(records, 0, SLO, TS, [], counter_delta({"a": before}, {"a": after}))
    assert s.router_overhead_ms == pytest.approx(10.0)
    assert s.router_share_of_e2e == pytest.approx(0.1)
    assert s.local_hit_ratio == pytest.approx(0.5)


def test_bad_metrics_text_is_a_clear_error() -> None:
    with pytest.raises(MetricsFormatError, match="num_requests_running"):
        parse_engine_metrics("# TYPE foo counter\nfoo_total 1\n")


def timed(
    ttft_s: float, e2e_s: float, out: int, srv_ttft_s: float, srv_e2e_s: float, prompt: int = 1000
) -> RequestRecord:
    outcome = Outcome(ok=True, status=200, ttft_s=ttft_s, e2e_s=e2e_s, output_tokens=out, prompt_tokens=prompt,
                      server_ttft_s=srv_ttft_s, server_e2e_s=srv_e2e_s)  # fmt: skip
    return RequestRecord("s", "f", 0, 0.0, 0.0, prompt, out, outcome)


def test_split_accounting_scales_only_the_engine_part() -> None:
    # 0.12 s wall TTFT, of which the engine 0.07 s: split -> 0.07 / 0.1 + 0.05 = 0.75 model s (meets
    # 1.0625); all scaled -> 1.2 model s (misses). Decode: engine 9 ms, client 18 ms over 9 gaps:
    # split TPOT = (0.09 + 0.009) / 9 = 11 ms; all scaled 0.018 / 0.1 / 9 = 20 ms.
    r = timed(0.12, 0.12 + 0.018, 10, srv_ttft_s=0.07, srv_e2e_s=0.07 + 0.009)
    ttft, tpot, e2e = model_latency(r, TS, "split")
    assert ttft == pytest.approx(0.75)
    assert tpot == pytest.approx((0.09 + 0.009) / 9)
    assert e2e == pytest.approx(0.75 + 0.099)
    assert model_latency(r, TS, "all_scaled")[0] == pytest.approx(1.2)
    assert meets_slo(r, SLO, TS, "split") == (True, True)
    assert meets_slo(r, SLO, TS, "all_scaled")[0] is False


def test_split_accounting_without_server_timing_falls_back_to_all_scaled() -> None:
    r = rec(0.12, 0.12 + 9 * 0.001, 10)
    assert model_latency(r, TS, "split") == model_latency(r, TS, "all_scaled")
    # server time above the client's (clock jitter) never makes the router time negative
    odd = timed(0.10, 0.11, 2, srv_ttft_s=0.2, srv_e2e_s=0.3)
    assert model_latency(odd, TS, "split")[0] == pytest.approx(1.0)


def test_summary_reports_both_accountings() -> None:
    fast_engine_slow_router = timed(0.12, 0.12 + 0.009, 10, srv_ttft_s=0.07, srv_e2e_s=0.079)
    s = summarise([fast_engine_slow_router], 0, SLO, TS, [], None)
    assert s.slo_attainment == 1.0 and s.slo_attainment_all_scaled == 0.0
    assert s.tps_within_slo > 0 and s.tps_within_slo_all_scaled == 0.0
    assert s.router_overhead_ms == pytest.approx(50.0)
    assert s.n_server_timed == 1
    assert s.ttft_p50_s == pytest.approx(0.75) and s.ttft_p50_all_scaled_s == pytest.approx(1.2)


def test_split_accounting_prefers_the_modelled_engine_time() -> None:
    # client 0.12 s wall TTFT; engine modelled 0.5 model s (0.05 wall at x0.1): the other 0.07 s wall
    # (router + emulator lag) count unscaled -> 0.57 model s, even though the server saw 0.09 s wall.
    o = Outcome(ok=True, status=200, ttft_s=0.12, e2e_s=0.12 + 0.02, output_tokens=11, prompt_tokens=1000,
                server_ttft_s=0.09, server_e2e_s=0.105, engine_ttft_model_s=0.5, engine_e2e_model_s=0.6)  # fmt: skip
    r = RequestRecord("s", "f", 0, 0.0, 0.0, 1000, 11, o)
    ttft, tpot, e2e = model_latency(r, TS, "split")
    assert ttft == pytest.approx(0.5 + 0.07)
    assert tpot == pytest.approx((0.1 + (0.02 - 0.01)) / 10)
    assert e2e == pytest.approx(ttft + 0.11)
    s = summarise([r], 0, SLO, TS, [], None)
    assert s.emulator_overhead_ms == pytest.approx(40.0) and s.router_overhead_ms == pytest.approx(30.0)
    assert s.engine_ttft_mean_s == pytest.approx(0.5)  # the modelled engine TTFT

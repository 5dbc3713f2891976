"""Bench summaries and policy results built from a throughput and an SLO attainment."""

from __future__ import annotations

from smetric.bench.metrics import Summary
from smetric.bench.report import PolicyResult


def summary(tps: float, att: float, n: int = 10) -> Summary:
    nan = float("nan")
    return Summary(n, n, 0, 0, 100.0, tps, tps, att, att, 1.0, *[0.1] * 7, 0.5, 0.9, 1.5, 2.0, 0.2, 10.0, 0.1,
                   tps_within_slo_all_scaled=tps / 2, slo_attainment_all_scaled=att / 2, n_server_timed=n,
                   ttft_p50_all_scaled_s=nan)  # fmt: skip


def result(label: str, tps: float, att: float) -> PolicyResult:
    return PolicyResult(label, "envoy+smetric-epp", label, "ok", "", summary(tps, att))

"""Dispatch ledger and the online prefill-rate estimate."""

from __future__ import annotations

import pytest

from smetric.router.ledger import DispatchLedger
from smetric.router.prefill_rate import PrefillRateEstimator


def test_ledger_adds_and_removes_once() -> None:
    ledger = DispatchLedger()
    ledger.add("r1", "a", 100, 0.5)
    ledger.add("r2", "a", 50, 0.25)
    ledger.add("r3", "b", 10, 0.1)
    assert (ledger.queued_tokens("a"), ledger.queued_cost_s("a")) == (150, 0.75)
    entry = ledger.remove("r1")
    assert entry is not None and entry.address == "a"
    assert ledger.remove("r1") is None  # idempotent
    assert (ledger.queued_tokens("a"), ledger.queued_cost_s("a")) == (50, 0.25)
    ledger.remove("r2")
    assert ledger.queued_cost_s("a") == 0.0 and ledger.queued_tokens("unknown") == 0.0
    assert len(ledger) == 1


def test_ledger_readding_a_request_moves_its_work() -> None:
    ledger = DispatchLedger()
    ledger.add("r", "a", 10, 1.0)
    ledger.add("r", "b", 10, 1.0)
    assert ledger.queued_cost_s("a") == 0.0 and ledger.queued_cost_s("b") == 1.0


def test_float_drift_reads_zero_when_idle() -> None:
    ledger = DispatchLedger()
    for i in range(1000):
        ledger.add(f"r{i}", "a", 0.1, 0.1)
    for i in range(1000):
        ledger.remove(f"r{i}")
    assert ledger.queued_cost_s("a") == 0.0 and ledger.queued_tokens("a") == 0.0


def test_rate_is_one_until_eight_samples_then_p90() -> None:
    rates = PrefillRateEstimator()
    for _ in range(7):
        rates.observe("a", cost_s=1.0, ttft_s=2.0)
    assert rates.speed("a") == 1.0
    rates.observe("a", cost_s=1.0, ttft_s=2.0)
    assert rates.speed("a") == 0.5
    for k in range(1, 11):  # samples 0.1 .. 1.0 -> with the eight 0.5s, p90 of 18
        rates.observe("a", cost_s=k / 10, ttft_s=1.0)
    ordered = sorted([0.5] * 8 + [k / 10 for k in range(1, 11)])
    assert rates.speed("a") == ordered[16]  # nearest rank: ceil(0.9 * 18) = 17th
    assert rates.speed("other") == 1.0


def test_rate_window_keeps_the_last_64() -> None:
    rates = PrefillRateEstimator()
    for _ in range(64):
        rates.observe("a", 1.0, 1.0)
    for _ in range(64):
        rates.observe("a", 3.0, 1.0)
    assert rates.samples("a") == 64 and rates.speed("a") == 3.0


def test_rate_ignores_bad_samples() -> None:
    rates = PrefillRateEstimator(min_samples=1)
    assert not rates.observe("a", 0.0, 1.0)
    assert not rates.observe("a", 1.0, 0.0)
    assert not rates.observe("a", float("inf"), 1.0)
    assert not rates.observe("a", float("nan"), 1.0)
    assert rates.speed("a") == 1.0
    with pytest.raises(ValueError):
        PrefillRateEstimator(window=4, min_samples=8)


def test_the_pool_prior_is_the_median_of_the_endpoints_with_enough_samples() -> None:
    rates = PrefillRateEstimator(pool_prior=True)
    assert rates.speed("new") == 1.0  # no endpoint has 8 samples yet
    for address, speed in (("a", 2.0), ("b", 4.0), ("c", 5.0)):
        for _ in range(8):
            rates.observe(address, cost_s=speed, ttft_s=1.0)
    rates.observe("d", cost_s=0.1, ttft_s=1.0)  # one sample: not part of the prior, scored at it
    assert rates.speed("new") == rates.speed("d") == 4.0
    rates.forget("b")  # dropped: scored at the median of a and c now
    assert rates.speed("b") == rates.prior() == 3.5
    assert PrefillRateEstimator().speed("new") == 1.0  # the simulator's: the calibrated 1.0
    calibrated = PrefillRateEstimator()
    for _ in range(8):
        calibrated.observe("a", cost_s=4.0, ttft_s=1.0)
    assert calibrated.speed("new") == 1.0


def test_rate_settings_bounds_are_exact() -> None:
    PrefillRateEstimator(window=1, min_samples=1, quantile=0.0)
    PrefillRateEstimator(window=8, min_samples=8, quantile=1.0)
    for bad in ({"window": 0, "min_samples": 1}, {"min_samples": 0}, {"window": 4, "min_samples": 5},
                {"quantile": -0.01}, {"quantile": 1.01}):  # fmt: skip
        with pytest.raises(
            ValueError, match=r"^need window >= 1, 1 <= min_samples <= window and 0 <= quantile <= 1$"
        ):
            PrefillRateEstimator(**bad)  # type: ignore[arg-type]


def test_rate_quantile_ends_and_sample_counts() -> None:
    lo = PrefillRateEstimator(window=4, min_samples=4, quantile=0.0)
    hi = PrefillRateEstimator(window=4, min_samples=4, quantile=1.0)
    for v in (1.0, 2.0, 3.0, 4.0):
        assert lo.observe("a", v, 1.0) is True
        hi.observe("a", v, 1.0)
    assert lo.speed("a") == 1.0 and hi.speed("a") == 4.0  # the slowest and the fastest sample
    assert lo.samples("a") == 4 and lo.samples("nobody") == 0


def test_the_pool_prior_for_one_to_six_endpoints() -> None:
    for speeds, median in (
        ((3.0,), 3.0),
        ((2.0, 5.0), 3.5),
        ((2.0, 4.0, 9.0), 4.0),
        ((1.0, 2.0, 4.0, 9.0), 3.0),
        ((1.0, 2.0, 4.0, 8.0, 9.0), 4.0),
        ((1.0, 2.0, 3.0, 5.0, 8.0, 9.0), 4.0),
    ):
        rates = PrefillRateEstimator(window=1, min_samples=1, pool_prior=True)
        for n, s in enumerate(speeds):
            rates.observe(f"e{n}", s, 1.0)
        assert rates.speed("new") == median, speeds

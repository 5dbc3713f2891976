"""Moved to :mod:`smetric.router.prefill_rate` (the router core shared with the simulator); re-exported here."""

from smetric.router.prefill_rate import MIN_SAMPLES, QUANTILE, WINDOW, PrefillRateEstimator

__all__ = ["MIN_SAMPLES", "QUANTILE", "WINDOW", "PrefillRateEstimator"]

"""Online prefill-rate estimate per endpoint (algorithms.md "Cost model"); shared by the picker and the simulator.

Each completed streaming request gives one sample ``cost_s / ttft_s``: cost-model seconds of
prefill done per wall second. ``cost_s`` is the computed tokens' cost only
(:class:`smetric.router.DispatchWork` keeps the global-tier fetch time apart), so a request
whose prefix was loaded from the global tier is not credited with phantom prefill. The estimate
is the p90 of the last 64 samples, used once an endpoint has at least 8; until then the speed is
the prior: 1.0 (the cost model as calibrated), or with ``pool_prior`` the median of the estimates
of the endpoints that have 8 samples (1.0 while none has). p90 rather than the mean because TTFT
includes queueing (and any fetch): the fast samples are the ones closest to the engine's true rate.

Why the picker takes the pool's prior (the simulator keeps 1.0, which is exact there: its engines
run the cost model): a deployed pool's engines run the same model on the same hardware, and the
calibration may be off by a factor (the bench's emulator runs ~4x the cost model's speed). An
endpoint without samples -- new, or one whose samples the picker dropped (an ejected endpoint,
:meth:`forget`) -- scored at 1.0 against learned 4.0 looks four times slower than the others, is
never picked, and so never learns its speed.
"""

from __future__ import annotations

from collections import deque

WINDOW = 64
MIN_SAMPLES = 8
QUANTILE = 0.9


class PrefillRateEstimator:
    __slots__ = ("_cache", "_prior", "_samples", "min_samples", "pool_prior", "quantile", "window")

    def __init__(
        self,
        window: int = WINDOW,
        min_samples: int = MIN_SAMPLES,
        quantile: float = QUANTILE,
        *,
        pool_prior: bool = False,
    ) -> None:
        if not (window >= 1 and 1 <= min_samples <= window and 0.0 <= quantile <= 1.0):
            raise ValueError("need window >= 1, 1 <= min_samples <= window and 0 <= quantile <= 1")
        self.window = window
        self.min_samples = min_samples
        self.quantile = quantile
        self.pool_prior = pool_prior
        self._samples: dict[str, deque[float]] = {}
        self._cache: dict[str, float] = {}
        self._prior: float | None = None  # the pool's prior, computed once per change

    def observe(self, address: str, cost_s: float, ttft_s: float) -> bool:
        """Add one sample; non-positive or non-finite inputs are ignored (returns ``False``)."""
        if not (cost_s > 0.0 and ttft_s > 0.0) or cost_s == float("inf") or ttft_s == float("inf"):
            return False
        q = self._samples.get(address)
        if q is None:
            q = self._samples[address] = deque(maxlen=self.window)
        q.append(cost_s / ttft_s)
        self._cache.pop(address, None)
        self._prior = None
        return True

    def speed(self, address: str) -> float:
        """Cost-seconds per wall second on ``address`` (1.0 until enough samples)."""
        cached = self._cache.get(address)
        if cached is not None:
            return cached
        q = self._samples.get(address)
        if q is None or len(q) < self.min_samples:
            return self.prior()
        ordered = sorted(q)
        # nearest-rank quantile
        rank = max(0, min(len(ordered) - 1, int(-(-self.quantile * len(ordered) // 1)) - 1))
        value = ordered[rank]
        self._cache[address] = value
        return value

    def prior(self) -> float:
        """The speed of an endpoint with fewer than ``min_samples`` samples (see the module)."""
        if not self.pool_prior:
            return 1.0
        if self._prior is None:
            known = sorted(self.speed(a) for a, q in self._samples.items() if len(q) >= self.min_samples)
            n = len(known)
            self._prior = (
                1.0 if n == 0 else known[n // 2] if n % 2 else (known[n // 2 - 1] + known[n // 2]) / 2
            )
        return self._prior

    def samples(self, address: str) -> int:
        q = self._samples.get(address)
        return 0 if q is None else len(q)

    def forget(self, address: str) -> None:
        """Drop ``address``'s samples: it is scored at the prior until it has ``min_samples`` new ones."""
        self._samples.pop(address, None)
        self._cache.pop(address, None)
        self._prior = None

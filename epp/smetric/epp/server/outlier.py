"""Passive outlier detection in the picker: an endpoint that answers errors is ejected from routing.

An engine that answers 503 / 429 / 500 (or resets its connections) while its ``/metrics`` page
stays healthy looks idle to every load signal, so without this it draws more new sessions than
the healthy ones and every session pinned to it fails each turn. The picker learns each response's
outcome from the response path (:meth:`smetric.epp.server.decide.Picker.on_response`): the final
status, and from the gateway's attempt count (``x-envoy-attempt-count``) or the served endpoint
(GIE metadata ``x-gateway-destination-endpoint-served``) which of the picker's list failed before it.

States of one endpoint (Envoy's outlier detection, passive, per picker replica)::

    closed --(consecutive_errors errors in a row)--> ejected --(ejection time over)--> half-open
    half-open --(the next request sent to it)--> probing
    probing --(its response: success)--> closed       (errors and the ejection count kept apart)
    probing --(its response: an error)--> ejected for longer (base x times ejected, capped)
    probing --(no response within base_ejection_s)--> half-open (one more probe)

An ejected or probing endpoint is *excluded*: the picker marks it stale, so the routing framework
leaves it out while any other endpoint is usable (all excluded: all are candidates, the framework's
documented fallback) and sessions pinned to it move. A half-open endpoint is a candidate again; the
first request routed to it is the probe, and no other request goes to it until the probe answers.

An error is a 5xx or 429 response, or an attempt the gateway gave up on (connect failure, reset,
per-try timeout: the next entry of the picker's list served the request). An error response with
``Retry-After`` (a 429 or 503 asking for a pause) keeps the endpoint out at least that long (capped
at ``max_ejection_s``) even before the error count ejects it; the answer after that pause is its
probe. Any other status (2xx, 3xx, 4xx but 429) is a success: the engine answered.

Defaults and why they differ from Envoy's (``cluster/v3/outlier_detection.proto``: consecutive_5xx
5, base_ejection_time 30 s, max_ejection_time 300 s, max_ejection_percent 10, interval 10 s):
3 errors, because each error the picker sees already cost a client a failed attempt and an
inference engine that answers three 5xx/429 in a row is refusing work, not flaking; 10 s base
ejection, because engines recover from overload (429) within seconds and a probe costs at most one
retried request; no interval, because the picker ejects on the response that crosses the count;
no ejection cap, because every-endpoint-excluded routes over all of them anyway.

The hot path (:meth:`OutlierDetector.excluded`, once per endpoint per decision) is one truthiness
test while nothing is ejected and one dict lookup otherwise; state exists only for endpoints with
errors (bounded by the pool: addresses come from the picker's own lists), and
:meth:`OutlierDetector.forget` drops an endpoint discovery removed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["OutlierDetector", "OutlierSettings", "is_error_status"]


@dataclass(frozen=True, slots=True)
class OutlierSettings:
    """``consecutive_errors`` 0 turns outlier detection off. The defaults are the picker's flags'
    (``--outlier-consecutive-errors``, ``--outlier-ejection-ms``, ``--outlier-max-ejection-ms``;
    :attr:`smetric.epp.settings.PickerSettings.outlier`)."""

    consecutive_errors: int
    base_ejection_s: float
    max_ejection_s: float

    def __post_init__(self) -> None:
        if self.consecutive_errors < 0:
            raise ValueError(f"consecutive_errors must be >= 0, got {self.consecutive_errors}")
        if not 0 < self.base_ejection_s <= self.max_ejection_s:
            raise ValueError(
                f"need 0 < base_ejection_s <= max_ejection_s, got {self.base_ejection_s}, {self.max_ejection_s}"
            )

    @property
    def enabled(self) -> bool:
        return self.consecutive_errors > 0


def is_error_status(status: int) -> bool:
    """A response that counts against the endpoint: 5xx or 429 (0 = no status: not counted)."""
    return status >= 500 or status == 429


class _Ejection:
    """One ejected (or half-open, or probing) endpoint."""

    __slots__ = ("probing_since", "until")

    def __init__(self, until: float) -> None:
        self.until = until
        self.probing_since: float | None = None


class OutlierDetector:
    """Per-endpoint error counts and ejections (see the module docstring)."""

    __slots__ = ("_clock", "_ejected", "_errors", "_history", "settings")

    def __init__(self, settings: OutlierSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._errors: dict[str, int] = {}  # consecutive errors of a closed endpoint (> 0 only)
        self._ejected: dict[str, _Ejection] = {}  # ejected, half-open or probing
        # times ejected and when last readmitted: a relapse soon after readmission ejects longer
        self._history: dict[str, tuple[int, float]] = {}

    # -- hot path ---------------------------------------------------------------------------------

    def excluded(self, address: str) -> bool:
        """Ejected, or probing: the picker must not send it a request now."""
        if not self._ejected:
            return False
        e = self._ejected.get(address)
        if e is None:
            return False
        now = self._clock()
        if e.probing_since is not None:
            if now - e.probing_since < self.settings.base_ejection_s:
                return True
            e.probing_since = None  # the probe never answered: allow another
            return False
        return now < e.until

    def dispatched(self, address: str) -> None:
        """A request was routed to ``address``: if it is half-open, that request is its probe."""
        if not self._ejected:
            return
        e = self._ejected.get(address)
        if e is not None and e.probing_since is None:
            now = self._clock()
            if now >= e.until:
                e.probing_since = now

    # -- outcomes ---------------------------------------------------------------------------------

    def failed(self, address: str, retry_after_s: float = 0.0) -> bool:
        """An error from ``address``. Returns ``True`` when this error ejected it."""
        s = self.settings
        if not s.enabled:
            return False
        now = self._clock()
        e = self._ejected.get(address)
        if e is not None:
            if e.probing_since is None and now < e.until:
                # an answer to a request sent before the ejection: already out; Retry-After extends it
                if retry_after_s > 0:
                    e.until = max(e.until, now + min(retry_after_s, s.max_ejection_s))
                return False
            self._eject(address, now, retry_after_s)  # the probe (or a half-open answer) failed
            return True
        n = self._errors.get(address, 0) + 1
        if n < s.consecutive_errors:
            self._errors[address] = n
            if retry_after_s > 0:  # the engine asked for a pause: none sent to it before it ends
                self._ejected[address] = _Ejection(now + min(retry_after_s, s.max_ejection_s))
            return False
        self._errors.pop(address, None)
        self._eject(address, now, retry_after_s)
        return True

    def succeeded(self, address: str) -> bool:
        """A success from ``address``. Returns ``True`` when it readmitted the endpoint (its probe,
        or any answer once the ejection time is over)."""
        self._errors.pop(address, None)
        e = self._ejected.get(address)
        if e is None:
            return False
        now = self._clock()
        if e.probing_since is None and now < e.until:
            return False  # a request sent before the ejection: the ejection stands
        del self._ejected[address]
        times, _ = self._history.get(address, (0, now))  # 0: a Retry-After pause, not an ejection
        self._history[address] = (times, now)
        return True

    def _eject(self, address: str, now: float, retry_after_s: float) -> None:
        s = self.settings
        times, readmitted = self._history.get(address, (0, now))
        e = self._ejected.get(address)
        # a failed probe, or a relapse within the last ejection's length of its readmission, ejects
        # longer (base x times ejected, as Envoy); a relapse later starts from scratch
        if e is None and times and now - readmitted > s.base_ejection_s * times:
            times = 0
        times += 1
        self._history[address] = (times, readmitted)
        duration = max(min(s.base_ejection_s * times, s.max_ejection_s), min(retry_after_s, s.max_ejection_s))
        if e is None:
            self._ejected[address] = _Ejection(now + duration)
        else:
            e.until, e.probing_since = now + duration, None

    # -- bookkeeping ------------------------------------------------------------------------------

    def forget(self, address: str) -> None:
        """Discovery removed ``address`` (a pod that comes back there starts afresh)."""
        self._errors.pop(address, None)
        self._ejected.pop(address, None)
        self._history.pop(address, None)

    def state(self, address: str) -> str:
        """``closed`` | ``ejected`` | ``half-open`` | ``probing`` (tests, logs)."""
        e = self._ejected.get(address)
        if e is None:
            return "closed"
        if e.probing_since is not None:
            return "probing"
        return "ejected" if self._clock() < e.until else "half-open"

    def ejected_count(self) -> int:
        """Endpoints excluded now (ejected or probing)."""
        return sum(1 for a in tuple(self._ejected) if self.excluded(a))

"""``--response-path=observer``: routed requests waiting for their response-observer stream.

The gateway skips the response on the routing stream and runs a second ext_proc filter in Envoy's
``observability_mode``; that stream starts with the request headers, whose ``x-smetric-request-id``
(the picker's own id) matches it to the waiting decision. A decision whose observer has not
attached ``timeout_s`` after its routing stream ended is reported missing once (a warning: the
gateway is not running the observer filter) and the servicer settles it as if the response had
ended. This module only matches; the servicer runs the response path on the matched state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server import messages as msgs
from smetric.epp.server.guard import PICKER_ID_HEADER
from smetric.epp.server.stream import StreamState

log = logging.getLogger("smetric.epp")


class ObserverMatcher:
    __slots__ = ("_warned", "awaiting", "metrics")

    def __init__(self, metrics: PickerMetrics) -> None:
        self.metrics = metrics
        self.awaiting: dict[str, StreamState] = {}  # routed requests by the picker's id
        self._warned: set[str] = set()

    def expect(self, st: StreamState) -> None:
        """``st`` was routed: its response will come on an observer stream."""
        self.awaiting[st.ledger_id] = st

    def wait(self, st: StreamState, timeout_s: float, on_missing: Callable[[StreamState], None]) -> None:
        """The routing stream ended before the response: call ``on_missing(st)`` after ``timeout_s``
        unless an observer attaches first."""
        if not st.observer_attached and st.observer_timer is None:
            st.observer_timer = asyncio.get_running_loop().call_later(timeout_s, on_missing, st)

    def done(self, st: StreamState) -> None:
        if self.awaiting.get(st.request_id) is st:
            del self.awaiting[st.request_id]

    def attach(self, first: ep.ProcessingRequest, enabled: bool) -> StreamState | None:
        """The waiting request an observer stream reports (its first message), or ``None``."""
        if not enabled:
            self._warn_once(
                "observer-off",
                "a response-observer stream arrived but --response-path is inline: ignored "
                "(the ledger is released when the routing stream ends)",
            )
        rid = ""
        if first.WhichOneof("request") == "request_headers":
            rid = msgs.header_map(first.request_headers.headers).get(PICKER_ID_HEADER, "")
        st = self.awaiting.get(rid) if rid else None
        if st is None or st.observer_attached:
            self.metrics.observer_streams.labels(outcome="unmatched").inc()
            return None
        st.observer_attached = True
        if st.observer_timer is not None:
            st.observer_timer.cancel()
            st.observer_timer = None
        self.metrics.observer_streams.labels(outcome="matched").inc()
        return st

    def missing(self, st: StreamState, timeout_s: float) -> bool:
        """The attach timer fired: ``True`` when no observer came (the caller settles ``st``)."""
        st.observer_timer = None
        if st.observer_attached:
            return False
        self.metrics.observer_streams.labels(outcome="missing").inc()
        self._warn_once(
            "observer-missing",
            "--response-path=observer but no observer stream came for request %s within %.1f s: "
            "is the gateway running the observability_mode ext_proc filter?",
            st.request_id,
            timeout_s,
        )
        return True

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

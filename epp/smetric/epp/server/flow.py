"""The picker's flow control: requests no endpoint can serve within their SLO wait, bounded.

The decision (:meth:`smetric.epp.server.decide.Picker.pick`) raises :class:`Held` when flow
control is on and :class:`smetric.policy.flowcontrol.FlowGate` finds no endpoint with capacity.
The servicer then parks the ext_proc stream in :class:`FlowQueue` (the stream simply waits: Envoy
holds the client's request) with a closure that re-runs the decision. A dispatcher task, alive
only while something waits, retries the queued requests in fair order (priority bands,
round-robin across flows: :class:`smetric.policy.flowcontrol.FairQueue`) every ``tick_s`` (the
scrape interval) and whenever :meth:`FlowQueue.kick` reports freed capacity (a first token, a
completed response); at most :data:`PROBES_PER_CYCLE` refusals per cycle. A request the queue
cannot hold, or that waited past its TTL or its TTFT deadline, gets :class:`FlowShed`, which
the servicer answers with 429 and ``Retry-After``.

Metrics (GIE's flow-control names, pkg/epp/metrics/metrics.go of
kubernetes-sigs/gateway-api-inference-extension, where they exist):
``inference_extension_flow_control_queue_size`` (gauge),
``inference_extension_flow_control_request_queue_duration_seconds`` (histogram, labels
``priority`` and ``outcome``: ``dispatched`` / ``shed``), and the picker's own
``smetric_epp_flow_control_shed_total{reason}`` (``capacity``, ``ttl``, ``deadline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from smetric.core.views import RequestView
from smetric.policy.flowcontrol import FairQueue, FlowControlConfig, ShedReason, queue_band

PROBES_PER_CYCLE = 8  # queued requests re-decided per dispatch cycle before it waits for capacity
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


class Held(Exception):
    """No endpoint has capacity for ``request`` now. ``limit_s`` / ``reason``: how long it may
    wait and why it is shed after that (:meth:`smetric.policy.flowcontrol.FlowGate.expiry`)."""

    def __init__(self, request: RequestView, limit_s: float, reason: ShedReason, late: bool = False) -> None:
        super().__init__(f"no endpoint can serve request {request.request_id!r} within its SLO now")
        self.request = request
        self.limit_s = limit_s
        self.reason = reason
        # hopeless_last: no endpoint could serve it in time even idle, so it waits with the late ones
        self.late = late


class LateSet:
    """Fingerprints of requests this picker answered 429 (flow control), so that their resends
    are known as late (``late_last``): bounded to ``capacity`` entries, each forgotten after
    ``ttl_s`` (a client that resends later than that is treated as fresh). One picker's memory:
    a resend that reaches another replica is fresh there."""

    __slots__ = ("_capacity", "_seen", "_ttl_s")

    def __init__(self, capacity: int = 8192, ttl_s: float = 600.0) -> None:
        self._capacity = capacity
        self._ttl_s = ttl_s
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, fingerprint: bytes, now_s: float) -> None:
        self._seen[fingerprint] = now_s + self._ttl_s
        self._seen.move_to_end(fingerprint)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def pop(self, fingerprint: bytes, now_s: float) -> bool:
        """Whether ``fingerprint`` was refused within its TTL (and forget it: one resend is late,
        its refusal, if any, records it again)."""
        expires = self._seen.pop(fingerprint, None)
        return expires is not None and expires > now_s


class FlowShed(Exception):
    """The request is refused by flow control (429 + Retry-After)."""

    def __init__(self, reason: ShedReason, message: str, counted: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.counted = counted  # False: the servicer counts it (raised outside the queue)


class FlowMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_size = Gauge(
            "inference_extension_flow_control_queue_size",
            "Requests held by flow control, waiting for an endpoint with capacity",
            registry=registry,
        )
        self.queue_duration = Histogram(
            "inference_extension_flow_control_request_queue_duration_seconds",
            "Time a request spent in the flow-control queue",
            ["priority", "outcome"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.shed = Counter(
            "smetric_epp_flow_control_shed",
            "Requests refused by flow control with 429, by reason (capacity, ttl, deadline, sessions)",
            ["reason"],
            registry=registry,
        )


@dataclass(eq=False)
class _Waiter:
    attempt: Callable[[], Any]
    future: asyncio.Future[Any]
    priority: int
    enqueued_s: float = field(default=0.0)
    fingerprint: bytes = b""
    late: bool = False


class FlowQueue:
    """Bounded fair queue of held ext_proc streams and its dispatcher (module docstring)."""

    def __init__(
        self,
        cfg: FlowControlConfig,
        metrics: FlowMetrics,
        clock: Callable[[], float],
        tick_s: float = 0.05,
    ) -> None:
        if not (tick_s > 0 and math.isfinite(tick_s)):
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        self.cfg = cfg
        self.metrics = metrics
        self.clock = clock
        self.tick_s = tick_s
        self.queue: FairQueue[_Waiter] = FairQueue(cfg.max_queued)
        self.late = LateSet()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.queue)

    def reconfigure(self, cfg: FlowControlConfig) -> None:
        """A reloaded config: new requests are held under ``cfg`` (queue bound, TTL, deadline
        shedding, Retry-After); those already waiting keep the expiry they were queued with."""
        self.cfg = cfg
        self.queue.capacity = cfg.max_queued

    async def hold(
        self, flow: str, priority: int, held: Held, attempt: Callable[[], Any], body: bytes | bytearray = b""
    ) -> Any:
        """Wait until ``attempt()`` (the decision, re-run) returns; :class:`FlowShed` when the
        queue is full or the wait passes ``held.limit_s`` (shed with ``held.reason``). The queue
        band is :func:`queue_band` of ``priority`` (the request's, which labels the metrics),
        late (``late_last``) when a request with this ``body`` was refused before (a 16-byte
        BLAKE2b fingerprint of it). ``attempt`` raises :class:`Held` while no endpoint has
        capacity; any other exception it raises is this call's."""
        now = self.clock()
        cfg = self.cfg
        fingerprint = hashlib.blake2b(body, digest_size=16).digest() if cfg.late_last and body else b""
        late = (bool(fingerprint) and self.late.pop(fingerprint, now)) or held.late
        w = _Waiter(attempt, asyncio.get_running_loop().create_future(), priority, now, fingerprint, late)
        band = queue_band(priority, late)
        if not self.queue.push(w, flow, band, now, now + held.limit_s, held.reason):
            self._refused(w, now)
            self.metrics.shed.labels(reason="capacity").inc()
            raise FlowShed("capacity", f"flow-control queue full ({cfg.max_queued} requests held)")
        self.metrics.queue_size.set(len(self.queue))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        if held.late:  # held for its band only: it goes at once when nothing fresh waits
            self._wake.set()
        return await w.future  # cancelled (stream gone): the waiter is skipped and dropped

    def _refused(self, w: _Waiter, now: float) -> None:
        """``w`` gets a 429: its resend will be late."""
        if w.fingerprint and self.cfg.late_last:
            self.late.add(w.fingerprint, now)

    def kick(self) -> None:
        """Capacity may have freed (a first token, a completion): run a dispatch cycle now."""
        if len(self.queue):
            self._wake.set()

    async def _run(self) -> None:
        """Dispatch cycles while anything waits: every ``tick_s`` or on :meth:`kick`."""
        while len(self.queue):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            self._wake.clear()
            self.dispatch()

    def dispatch(self) -> None:
        """One cycle: refuse what expired, then re-decide queued requests in fair order."""
        now = self.clock()
        m = self.metrics
        for w, reason, waited in self.queue.expire(now):
            if not w.future.done():
                self._refused(w, now)
                m.shed.labels(reason=reason).inc()
                m.queue_duration.labels(priority=str(w.priority), outcome="shed").observe(waited)
                w.future.set_exception(
                    FlowShed(reason, f"no endpoint could serve the request within its {reason}")
                )
        misses = 0
        while len(self.queue) and misses < PROBES_PER_CYCLE:
            for w, flow, band, enqueued_s in self.queue.heads():
                if w.future.done():  # the stream went away while it waited
                    self.queue.pop(flow, band)
                    break
                if w.late and self.queue.waiting_at_or_above(band + 1):
                    break  # a late request goes only when no fresh one waits
                try:
                    out = w.attempt()
                except Held:
                    misses += 1
                    if misses >= PROBES_PER_CYCLE:
                        break
                    continue
                except Exception as exc:  # the decision failed otherwise: the stream answers it
                    self.queue.pop(flow, band)
                    w.future.set_exception(exc)
                    break
                self.queue.pop(flow, band)
                m.queue_duration.labels(priority=str(w.priority), outcome="dispatched").observe(
                    now - enqueued_s
                )
                w.future.set_result(out)
                break
            else:
                break
        m.queue_size.set(len(self.queue))

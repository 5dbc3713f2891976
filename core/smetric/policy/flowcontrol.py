"""SLO-aware flow control: a bounded, fair gateway queue in front of any policy.

Past the knee every endpoint's queue grows: a router that always dispatches hands each request
to an engine where it waits past its TTFT SLO, and every request misses. Flow control holds a
request at the gateway while **no endpoint can meet its SLO**, dispatches it when capacity
frees, and sheds what can no longer make it (the client gets 429 + ``Retry-After``). The
simulator and the picker both run this module; it wraps the routing decision, so every policy
(SMetric and the baselines alike) can run behind it.

* **Gate** (:meth:`FlowGate.has_capacity`): an endpoint can take the request now when it is
  fresh, its engine has at most ``max_engine_waiting`` requests waiting (scraped
  ``num_requests_waiting``), the request's uncached tokens fit its free KV (``(1 - kv_usage) x
  capacity`` minus the ledger's tokens dispatched to it and not yet started; skipped when the
  capacity is unknown), and either its TTFT estimate -- the ledger's queued work plus this
  request's own, the estimate SMetric's ``meets`` uses
  (:func:`smetric.policy.estimates.tier_times_s`) -- fits within ``slack x`` the time left of the
  request's TTFT SLO (the SLO minus what it already waited at the gateway), or nothing is queued
  there (``queued_prefill_tokens <= idle_queued_tokens``): a request no idle engine could serve
  in time is still served, never starved. The estimate alone is not enough: past the knee the
  engines' own queues (KV full: requests wait for a running one to finish) are what the ledger
  does not see (docs/overload.md).
* **Queue** (:class:`FairQueue`): bounded by ``max_queued`` requests; bands by priority
  (higher first); within a band one FIFO per flow (session / agent) served round-robin, so one
  agent's burst cannot starve the others (GIE's flow control: priority bands, per-flow queues,
  a fairness policy between flows, a capacity bound, a TTL).
* **Late requests last** (``late_last``): a resend after a 429 has already missed its TTFT SLO
  (its TTFT counts from the first send), so it waits in a band below every fresh request of
  its priority and is dispatched only when no fresh request waits: under sustained overload the
  capacity goes to requests that can still make their SLO (Facebook's adaptive LIFO and
  CoDel-style queueing make the same choice, "Fail at Scale", ACM Queue 13(8), 2015).
* **TPOT guard** (``tpot_guard``): an endpoint takes a request only if its running decodes keep
  their TPOT SLO once this prefill joins (:func:`smetric.policy.estimates.tpot_guard_ok`, the
  guard SMetric's ``meets`` uses). Past the knee a gate on TTFT alone lets every engine's
  chunked prefills stretch its decode steps, and requests that started in time miss on TPOT.
* **Where, not only whether** (``filter_candidates``): the gate decides *whether* a request goes
  now; the policy then picks *where*, among every endpoint. With ``filter_candidates`` the
  endpoints the gate refuses are hidden from the policy (:meth:`FlowGate.candidates`), as GIE
  runs its filters before its scorers, so a policy that reads no SLO (LMetric, Dynamo) sends the
  request only where it can start in time.
* **Shedding**: a request is shed on arrival when the queue is full (``reason=capacity``) and
  while queued when it has waited ``ttl_s`` or its TTFT deadline passed (``reason=ttl`` /
  ``deadline``; ``shed_on_deadline``): it can no longer make its SLO, and the capacity goes to
  one that can. The answer is 429 with ``Retry-After: retry_after_s``.

Pure logic, no I/O and no clock: callers pass ``now_s``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.estimates import prompt_tokens, request_slo, tier_times_s, tpot_guard_ok

ShedReason = Literal["capacity", "ttl", "deadline", "sessions"]
SHED_REASONS: tuple[ShedReason, ...] = ("capacity", "ttl", "deadline", "sessions")


@dataclass(frozen=True, slots=True)
class FlowControlConfig:
    """Flow-control settings of one pool (the picker config's ``flowControl``, the CRD's
    ``router.flowControl``, ``smetric simulate --flow-control``)."""

    enabled: bool = True  # the default since 6 Dec 2026 (docs/overload.md, section 8)
    max_queued: int = 1024  # requests held at the gateway (all flows, all bands)
    ttl_s: float = 2.0  # the longest a request waits at the gateway (docs/overload.md: why short)
    shed_on_deadline: bool = True  # shed a queued request once its TTFT deadline has passed
    retry_after_s: float = 5.0  # Retry-After of a 429
    slack: float = 1.0  # an endpoint meets when its estimate <= slack x the SLO time left
    idle_queued_tokens: float = 0.0  # an endpoint with at most this queued (ledger) takes any request
    max_engine_waiting: int = 0  # an endpoint whose engine has more requests waiting takes none
    kv_headroom: bool = True  # the request's uncached tokens must fit the endpoint's free KV
    late_last: bool = True  # a resend after a 429 (already late) waits below every fresh request
    tpot_guard: bool = True  # an endpoint takes a request only if its decodes keep the TPOT SLO
    filter_candidates: bool = False  # the policy chooses only among the endpoints the gate accepts
    # a request no endpoint could serve in time even idle waits with the late ones
    hopeless_last: bool = True
    # a request no endpoint holds (or the tier can supply) cold_hit_share of waits with the late ones;
    # a simulator ablation, not in the picker config: it changed nothing (docs/overload.md, 8g)
    cold_last: bool = False
    cold_hit_share: float = 0.5
    # at most this many sessions live at once (0: no budget); a session is live until it has been
    # idle session_idle_s; a simulator ablation, not in the picker config (docs/overload.md, 8g)
    session_budget: int = 0
    session_idle_s: float = 60.0
    session_kv_share: float = 0.0  # and the live sessions' prompts within this share of the pool's KV
    # an adaptive count (AIMD): the limit halves when more than this share of the last session_window
    # returning turns found less than half their prompt held (0: off; SessionBudget)
    session_miss_share: float = 0.0
    session_window: int = 20

    def __post_init__(self) -> None:
        problems = [
            msg
            for ok, msg in (
                (self.max_queued >= 1, f"max_queued must be >= 1, got {self.max_queued}"),
                (math.isfinite(self.ttl_s) and self.ttl_s > 0, f"ttl_s must be > 0, got {self.ttl_s}"),
                (
                    math.isfinite(self.retry_after_s) and self.retry_after_s >= 0,
                    f"retry_after_s must be >= 0, got {self.retry_after_s}",
                ),
                (math.isfinite(self.slack) and self.slack > 0, f"slack must be > 0, got {self.slack}"),
                (
                    math.isfinite(self.idle_queued_tokens) and self.idle_queued_tokens >= 0,
                    f"idle_queued_tokens must be >= 0, got {self.idle_queued_tokens}",
                ),
                (
                    self.max_engine_waiting >= 0,
                    f"max_engine_waiting must be >= 0, got {self.max_engine_waiting}",
                ),
                (
                    math.isfinite(self.cold_hit_share) and 0 < self.cold_hit_share <= 1,
                    f"cold_hit_share must be in (0, 1], got {self.cold_hit_share}",
                ),
                (self.session_budget >= 0, f"session_budget must be >= 0, got {self.session_budget}"),
                (
                    math.isfinite(self.session_kv_share) and self.session_kv_share >= 0,
                    f"session_kv_share must be >= 0, got {self.session_kv_share}",
                ),
                (
                    math.isfinite(self.session_miss_share) and 0 <= self.session_miss_share < 1,
                    f"session_miss_share must be in [0, 1), got {self.session_miss_share}",
                ),
                (self.session_window >= 1, f"session_window must be >= 1, got {self.session_window}"),
                (
                    math.isfinite(self.session_idle_s) and self.session_idle_s > 0,
                    f"session_idle_s must be > 0, got {self.session_idle_s}",
                ),
            )
            if not ok
        ]
        if problems:
            raise ValueError("invalid flow control: " + "; ".join(problems))


def queue_band(priority: int, late: bool) -> int:
    """The queue band of a request of ``priority``: ``2 x priority``, one lower for a late request
    (a resend after a 429, with ``late_last``): a priority's fresh requests go first, then its
    late ones, and a lower priority's after both."""
    return 2 * priority - (1 if late else 0)


class FlowGate:
    """Whether some endpoint can take a request now (see the module docstring, "Gate")."""

    __slots__ = ("_cfg", "_params")

    def __init__(self, cfg: FlowControlConfig, params: PolicyParams) -> None:
        self._cfg = cfg
        self._params = params

    @property
    def config(self) -> FlowControlConfig:
        return self._cfg

    def deadline_s(self, request: RequestView) -> float:
        """The request's TTFT SLO in seconds (its ``x-slo-ttft-ms`` override applied)."""
        return request_slo(request, self._params).ttft_slo_s(prompt_tokens(request))

    def band(self, priority: int = 0, late: bool = False) -> int:
        """The queue band of a request of ``priority`` (:func:`queue_band`); ``late`` counts only
        with ``late_last``."""
        return queue_band(priority, late and self._cfg.late_last)

    def expiry(self, request: RequestView) -> tuple[float, ShedReason]:
        """How long ``request`` may wait in the queue and the shed reason when it has."""
        cfg = self._cfg
        deadline = self.deadline_s(request) if cfg.shed_on_deadline else math.inf
        return (deadline, "deadline") if deadline < cfg.ttl_s else (cfg.ttl_s, "ttl")

    def meets(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], waited_s: float = 0.0
    ) -> bool:
        """Some fresh endpoint's TTFT estimate fits ``slack x`` the SLO time left (the estimate
        alone, as a policy's ``meets``; :meth:`has_capacity` adds the engine gauges)."""
        return any(self._meets_each(request, endpoints, waited_s))

    def _times(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Sequence[float]:
        """Each endpoint's TTFT estimate for ``request`` (queued prefill + its own, SMetric's)."""
        p = self._params
        return tier_times_s(request, endpoints, p.cost_model, p.global_fetch_s_per_token)

    def _meets_each(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        waited_s: float,
        times: Sequence[float] | None = None,
    ) -> list[bool]:
        left = self._cfg.slack * (self.deadline_s(request) - max(0.0, waited_s))
        if left <= 0:
            return [False] * len(endpoints)
        if times is None:
            times = self._times(request, endpoints)
        return [t <= left and not ep.stale for t, ep in zip(times, endpoints, strict=True)]

    def _tpot_ok(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        ok: list[bool],
        times: Sequence[float],
    ) -> list[bool]:
        """``ok`` and the endpoint's running decodes keep their TPOT SLO if this request's
        prefill (behind the endpoint's queued prefill: ``times``) joins within its TTFT SLO
        (:func:`smetric.policy.estimates.tpot_guard_ok`, the guard SMetric's ``meets`` uses)."""
        p = self._params
        slo = request_slo(request, p)
        horizon = slo.ttft_slo_s(prompt_tokens(request))
        return [
            o and tpot_guard_ok(ep, t, horizon, slo.tpot_s, p.decode_step)
            for o, t, ep in zip(ok, times, endpoints, strict=True)
        ]

    def hopeless(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> bool:
        """``hopeless_last``: no endpoint could serve ``request`` within ``slack x`` its TTFT SLO even with
        nothing queued there (its own compute and fetch alone miss, e.g. a long prompt no cache holds). It
        waits in the late band: served when no request that can still make its SLO waits."""
        if not self._cfg.hopeless_last or not _any_fresh(endpoints):
            return False
        bare = [
            replace(ep, queued_prefill_cost=0.0, queued_prefill_tokens=0.0, queued_fetch_s=0.0)
            for ep in endpoints
        ]
        left = self._cfg.slack * self.deadline_s(request)
        return not any(
            t <= left for t, ep in zip(self._times(request, bare), endpoints, strict=True) if not ep.stale
        )

    def cold(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> bool:
        """``cold_last``: no fresh endpoint holds, and the global tier cannot supply, ``cold_hit_share``
        of ``request``'s prompt (a session no GPU holds: its turn would recompute and evict the
        sessions the pool does hold). It waits in the late band: served when no request of a
        session the pool holds waits. Past the knee of a pool without a full tier, a gate that admits
        such a turn evicts a session that comes back for its next turn (docs/overload.md, 8g)."""
        if not self._cfg.cold_last or not _any_fresh(endpoints):
            return False
        need = self._cfg.cold_hit_share * prompt_tokens(request)
        return not any(
            max(ep.local_hit_tokens, ep.global_hit_tokens) >= need for ep in endpoints if not ep.stale
        )

    def waits_last(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> bool:
        """A first attempt that waits in the late band: :meth:`hopeless` or :meth:`cold`."""
        return self.hopeless(request, endpoints) or self.cold(request, endpoints)

    def admissible(self, request: RequestView, ep: EndpointSnapshot) -> bool:
        """The engine gauges allow one more request: fresh, few enough waiting, KV room."""
        cfg = self._cfg
        if ep.stale or ep.waiting > cfg.max_engine_waiting:
            return False
        if not cfg.kv_headroom or ep.kv_capacity_tokens <= 0:
            return True
        n = prompt_tokens(request)
        need = n - min(max(0, ep.local_hit_tokens), n)
        if need > ep.kv_capacity_tokens:
            # no amount of waiting frees that much: not the gate's question (the engine refuses
            # a prompt over its context with a 400; holding it would end in a 429 worth retrying)
            return True
        used = min(1.0, max(0.0, ep.kv_usage))
        free = (1.0 - used) * ep.kv_capacity_tokens - max(0.0, ep.queued_prefill_tokens)
        return need <= free

    def has_capacity(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], waited_s: float = 0.0
    ) -> bool:
        """Some endpoint is :meth:`admissible` and meets the SLO time left or is idle."""
        return any(self.capable(request, endpoints, waited_s))

    def capable(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], waited_s: float = 0.0
    ) -> list[bool]:
        """Per endpoint: :meth:`admissible`, its decodes keep their TPOT (``tpot_guard``), and it
        meets the SLO time left or is idle -- the gate's verdict on each endpoint."""
        ok = [self.admissible(request, ep) for ep in endpoints]
        if not any(ok):
            return ok
        times = None  # the TTFT estimates, computed once for the TPOT guard and the SLO check
        if self._cfg.tpot_guard:
            times = self._times(request, endpoints)
            ok = self._tpot_ok(request, endpoints, ok, times)
            if not any(ok):
                return ok
        bound = self._cfg.idle_queued_tokens
        idle = [o and ep.queued_prefill_tokens <= bound for o, ep in zip(ok, endpoints, strict=True)]
        if all(i or not o for i, o in zip(idle, ok, strict=True)):
            return idle  # every candidate is idle: no estimate needed
        meets = self._meets_each(request, endpoints, waited_s, times)
        return [i or (o and m) for i, o, m in zip(idle, ok, meets, strict=True)]

    def candidates(
        self, request: RequestView, endpoints: list[EndpointSnapshot], waited_s: float = 0.0
    ) -> list[EndpointSnapshot] | None:
        """The endpoints the policy may choose from: ``None`` when none can take the request (hold
        it); else ``endpoints`` as given, or with ``filter_candidates`` each endpoint the gate
        refuses marked stale, so the policy scores only those that can take it (GIE's filters
        before its scorers; the framework shows a policy no stale endpoint while a fresh one exists).

        With every endpoint stale (ejected for errors, or no fresh scrape) the gate knows no
        capacity to wait for: ``endpoints`` as given, and the request takes the path it takes
        without flow control (the engine's own answer, not a 429 that blames load)."""
        if not _any_fresh(endpoints):
            return endpoints
        mask = self.capable(request, endpoints, waited_s)
        if not any(mask):
            return None
        if not self._cfg.filter_candidates or all(mask):
            return endpoints
        return [
            ep if ok or ep.stale else replace(ep, stale=True) for ep, ok in zip(endpoints, mask, strict=True)
        ]


def _any_fresh(endpoints: Sequence[EndpointSnapshot]) -> bool:
    return any(not ep.stale for ep in endpoints)


T = TypeVar("T")


@dataclass(slots=True, eq=False)
class _Entry(Generic[T]):
    item: T
    flow: Hashable
    priority: int
    enqueued_s: float
    expires_s: float
    reason: ShedReason
    seq: int
    live: bool = True


class FairQueue(Generic[T]):
    """Bounded priority bands of per-flow FIFOs served round-robin (module docstring, "Queue").

    ``push`` refuses when full; ``expire(now)`` removes what has waited past its expiry;
    ``heads()`` lists the head of every flow in service order (highest band first, round-robin
    within it from the flow after the last one served); ``pop(flow, priority)`` takes a flow's
    head and moves the round-robin cursor past it. O(log n) per push/expiry, O(flows) per
    ``heads``."""

    __slots__ = ("_band_len", "_bands", "_expiry", "_len", "_max", "_seq")

    def __init__(self, max_queued: int) -> None:
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self._max = max_queued
        # priority -> flow -> FIFO; dict order is the round-robin order (a served flow moves last)
        self._bands: dict[int, dict[Hashable, deque[_Entry[T]]]] = {}
        self._expiry: list[tuple[float, int, _Entry[T]]] = []
        self._band_len: dict[int, int] = {}  # priority -> entries queued in that band
        self._len = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._len

    def waiting_at_or_above(self, priority: int) -> int:
        """Entries queued in band ``priority`` or a higher one (what a new arrival of that band
        would overtake if it went straight through)."""
        return sum(n for p, n in self._band_len.items() if p >= priority)

    @property
    def capacity(self) -> int:
        return self._max

    @capacity.setter
    def capacity(self, max_queued: int) -> None:
        """A new bound (a reloaded config); entries past a lower one stay until served or expired."""
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self._max = max_queued

    def push(
        self,
        item: T,
        flow: Hashable,
        priority: int,
        now_s: float,
        expires_s: float,
        reason: ShedReason = "ttl",
    ) -> bool:
        """Queue ``item``; ``False`` (nothing queued) when the queue is full."""
        if self._len >= self._max:
            return False
        self._seq += 1
        e = _Entry(item, flow, priority, now_s, expires_s, reason, self._seq)
        band = self._bands.get(priority)
        if band is None:
            band = self._bands[priority] = {}
            self._bands = dict(sorted(self._bands.items(), key=lambda kv: -kv[0]))
        band.setdefault(flow, deque()).append(e)
        heapq.heappush(self._expiry, (expires_s, e.seq, e))
        self._len += 1
        self._band_len[priority] = self._band_len.get(priority, 0) + 1
        return True

    def next_expiry_s(self) -> float:
        """When the next queued item expires (``inf`` when empty)."""
        exp = self._expiry
        while exp and not exp[0][2].live:
            heapq.heappop(exp)
        return exp[0][0] if exp else math.inf

    def expire(self, now_s: float) -> list[tuple[T, ShedReason, float]]:
        """Remove every item whose expiry is ``<= now_s``: ``(item, reason, waited_s)``, oldest
        expiry first."""
        out: list[tuple[T, ShedReason, float]] = []
        exp = self._expiry
        while exp and exp[0][0] <= now_s:
            _, _, e = heapq.heappop(exp)
            if not e.live:
                continue
            self._remove(e)
            out.append((e.item, e.reason, now_s - e.enqueued_s))
        return out

    def heads(self) -> Iterator[tuple[T, Hashable, int, float]]:
        """``(item, flow, priority, enqueued_s)`` of each flow's head, in service order; lazy
        (O(1) per head taken), so stop iterating once the queue is changed (``pop``, ``push``)."""
        for priority, band in self._bands.items():
            for flow, fifo in band.items():
                e = fifo[0]
                yield e.item, flow, priority, e.enqueued_s

    def pop(self, flow: Hashable, priority: int) -> T:
        """Take ``flow``'s head in band ``priority``; the flow goes to the back of its band."""
        band = self._bands[priority]
        fifo = band.pop(flow)
        e = fifo.popleft()
        if fifo:
            band[flow] = fifo  # re-inserted last: round-robin
        e.live = False
        self._len -= 1
        self._prune(priority)
        return e.item

    def _remove(self, e: _Entry[T]) -> None:
        band = self._bands[e.priority]
        fifo = band[e.flow]
        fifo.remove(e)  # expiring entries sit near a FIFO's head
        if not fifo:
            del band[e.flow]
        e.live = False
        self._len -= 1
        self._prune(e.priority)

    def _prune(self, priority: int) -> None:
        n = self._band_len[priority] - 1
        if n:
            self._band_len[priority] = n
        else:
            del self._band_len[priority]
        if not self._bands[priority]:
            del self._bands[priority]

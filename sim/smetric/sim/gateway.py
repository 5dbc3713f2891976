"""The simulated gateway's flow control and its clients' reaction, plus overload diagnostics.

:class:`SimGateway` runs :mod:`smetric.policy.flowcontrol` (the picker's code) in front of the
simulated router: a request for which no instance has capacity (:class:`FlowGate`) waits in the
bounded fair queue (flows = agent families: one agent's sessions are one flow), is dispatched
when an instance can take it (checked at every scrape tick while something waits, on the
gauges and ledger of that moment, as the picker does), and is shed with 429 + ``Retry-After`` when the queue
is full or it waited past its TTL / TTFT deadline.

The client (an agent's HTTP client) honours ``Retry-After``: it resends the same request after
``retry_after_s x U[1, 1.5)`` (seeded jitter, so retries do not arrive in lock-step) and gives up
after ``max_retries`` sheds; a given-up request is an error answer and its session moves on (the
agent's next turn). Its TTFT, when served, counts from the *first* send: a retried request
rarely meets its SLO, so shedding is never a free win in TPS within SLO.

:class:`OverloadProbe` (diagnosis only, ``simulate(probe=...)``): per dispatch, whether the
router's own estimate already said no instance could meet the request's TTFT SLO, how many
dispatches one instance took within one scrape interval (herding), and each instance's engine
queue over time.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import Instance
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FairQueue, FlowControlConfig, FlowGate
from smetric.policy.session_budget import SessionBudget


@dataclass(frozen=True, slots=True)
class ClientRetry:
    """How a simulated client reacts to a 429: resend after ``Retry-After`` x jitter, at most
    ``max_retries`` times (then the request fails and the session goes on)."""

    max_retries: int = 8
    jitter: float = 0.5
    # a 429 for the session budget (reason "sessions") is not counted against max_retries: the agent
    # waits to start (or resume) its session rather than dropping the turn (docs/overload.md, 8g)
    sessions_wait: bool = False

    def __post_init__(self) -> None:
        if self.max_retries < 0 or not (0 <= self.jitter <= 10):
            raise ValueError(f"invalid client retry: {self}")


class SimGateway:
    """Flow control of one simulated run (see the module docstring)."""

    __slots__ = (
        "attempts",
        "budget",
        "cfg",
        "client",
        "failed",
        "flow_of",
        "gate",
        "hopeless",
        "max_len",
        "queue",
        "rng",
        "session_of",
        "shed_by_reason",
        "waits",
    )

    def __init__(self, cfg: FlowControlConfig, params: PolicyParams, client: ClientRetry, seed: int) -> None:
        self.cfg = cfg
        self.gate = FlowGate(cfg, params)
        self.client = client
        self.queue: FairQueue[int] = FairQueue(cfg.max_queued)
        self.rng = np.random.default_rng(seed + 7_919)
        self.attempts: dict[int, int] = {}  # key -> sheds so far
        self.flow_of: dict[int, int] = {}  # queued key -> its flow (family key)
        self.failed: set[int] = set()  # keys given up after max_retries sheds
        self.hopeless: set[int] = set()  # keys no instance could serve in time even idle (hopeless_last)
        self.shed_by_reason: dict[str, int] = {}
        self.waits: list[float] = []  # gateway wait of every dispatched-after-queueing attempt
        self.max_len = 0
        self.session_of: dict[int, Hashable] = {}  # admitted key -> its session (the budget's unit)
        # session_budget / session_kv_share / session_miss_share: the sessions live at once (None: no budget)
        self.budget = SessionBudget.from_config(cfg)

    def late(self, key: int) -> bool:
        """``key`` is a resend after a 429 and resends wait last (``late_last``)."""
        return (self.cfg.late_last and key in self.attempts) or key in self.hopeless

    def mark_hopeless(self, key: int, request: RequestView, snaps: list[EndpointSnapshot]) -> None:
        """``hopeless_last`` / ``cold_last``: remember ``key`` as late when no instance could serve it
        in time even idle, or none holds its session (:meth:`FlowGate.waits_last`)."""
        if self.gate.waits_last(request, snaps):
            self.hopeless.add(key)

    def admit_session(
        self, key: int, session: Hashable, request: RequestView, snaps: list[EndpointSnapshot], now_s: float
    ) -> bool:
        """``session_budget`` / ``session_kv_share``: whether ``key`` (a request of ``session``) may go
        on to the gate; admitted, its session is live from now (no budget: always)."""
        budget = self.budget
        if budget is None:
            return True
        kv = sum(ep.kv_capacity_tokens for ep in snaps)  # the pool's KV tokens
        if not budget.admits(session, now_s, request.prompt_tokens, kv):
            return False
        budget.touch(session, now_s, request.prompt_tokens)
        self.session_of[key] = session
        return True

    def dispatched(self, key: int, snap: EndpointSnapshot, prompt_tokens: int) -> None:
        """``key`` went to ``snap``'s endpoint: what it held of the prompt (GPU or tier) is the adaptive
        session budget's signal (``session_miss_share``)."""
        budget = self.budget
        if budget is None:
            return
        session = self.session_of.get(key)
        if session is not None:
            held = max(snap.local_hit_tokens, snap.global_hit_tokens)
            budget.dispatched(session, held, prompt_tokens)

    def finished(self, key: int, now_s: float) -> None:
        """Request ``key`` is done: a finished turn keeps its session live."""
        budget = self.budget
        if budget is None:
            return
        session = self.session_of.pop(key, None)
        if session is not None:
            budget.finished(session, now_s)

    def admits(
        self, request: RequestView, snaps: list[EndpointSnapshot], late: bool = False
    ) -> list[EndpointSnapshot] | None:
        """An arriving request goes straight to the router when nothing of its band or a higher
        one waits (it would overtake it unfairly; a fresh request passes the late ones waiting
        below it) and some instance has capacity: the snapshots the router chooses from
        (:meth:`~smetric.policy.flowcontrol.FlowGate.candidates`), ``None`` to hold it."""
        band = self.gate.band(late=late)
        if self.queue.waiting_at_or_above(band):
            return None
        return self.gate.candidates(request, snaps)

    def hold(self, key: int, flow: int, request: RequestView, now_s: float) -> bool:
        """Queue ``key``; ``False`` when the queue is full (shed it: reason ``capacity``)."""
        limit_s, reason = self.gate.expiry(request)
        band = self.gate.band(late=self.late(key))
        ok = self.queue.push(key, flow, band, now_s, now_s + limit_s, reason)
        if ok:
            self.flow_of[key] = flow
            self.max_len = max(self.max_len, len(self.queue))
        return ok

    def shed(self, key: int, reason: str, now_s: float) -> float | None:
        """Count a shed; the client's resend time, or ``None`` when it gives up."""
        self.shed_by_reason[reason] = self.shed_by_reason.get(reason, 0) + 1
        waits = reason == "sessions" and self.client.sessions_wait
        n = self.attempts.get(key, 0) + (0 if waits else 1)
        self.attempts[key] = n
        if n > self.client.max_retries:
            self.failed.add(key)
            return None
        jitter = 1.0 + self.client.jitter * float(self.rng.random())
        return now_s + max(self.cfg.retry_after_s, 1e-3) * jitter

    def metrics(self, keys_in_window: set[int]) -> dict[str, float | int]:
        w = np.asarray(self.waits, dtype=np.float64)
        shed_once = sum(1 for k in keys_in_window if k in self.attempts)
        n = max(1, len(keys_in_window))
        return {
            "fc_sheds": int(sum(self.shed_by_reason.values())),
            **{f"fc_sheds_{r}": int(c) for r, c in sorted(self.shed_by_reason.items())},
            "fc_shed_share": shed_once / n,
            "fc_failed_share": sum(1 for k in keys_in_window if k in self.failed) / n,
            "fc_queued_dispatches": int(w.size),
            "fc_wait_p50_s": float(np.percentile(w, 50)) if w.size else math.nan,
            "fc_wait_p99_s": float(np.percentile(w, 99)) if w.size else math.nan,
            "fc_wait_max_s": float(w.max()) if w.size else math.nan,
            "fc_queue_max": self.max_len,
        }


class OverloadProbe:
    """Diagnosis counters of one run (module docstring); read after :func:`simulate`."""

    __slots__ = (
        "_gate",
        "_last_tick",
        "_tick_counts",
        "_tick_s",
        "busy_engine",
        "dispatches",
        "doomed",
        "doomed_missed",
        "herd_max",
        "herd_samples",
        "hi_s",
        "lo_s",
        "queue_area",
        "queue_last",
        "queue_max",
    )

    def __init__(
        self, params: PolicyParams, n_instances: int, tick_s: float, lo_s: float, hi_s: float
    ) -> None:
        self._gate = FlowGate(FlowControlConfig(), params)
        self._tick_s = tick_s
        self._last_tick = -1
        self._tick_counts = [0] * n_instances
        self.lo_s, self.hi_s = lo_s, hi_s
        self.dispatches = 0
        self.busy_engine = 0  # dispatches to an engine that already had requests waiting (scraped)
        self.doomed: set[int] = set()
        self.doomed_missed = 0
        self.herd_max: list[int] = []  # per scrape interval with dispatches: most to one instance
        self.herd_samples = 0
        self.queue_area = [0.0] * n_instances  # integral of engine waiting over the window
        self.queue_last = [(lo_s, 0)] * n_instances
        self.queue_max = [0] * n_instances

    def dispatched(
        self, key: int, t: float, request: RequestView, snaps: list[EndpointSnapshot], k: int
    ) -> None:
        if not self.lo_s <= t < self.hi_s:
            return
        self.dispatches += 1
        if not self._gate.meets(request, snaps):
            self.doomed.add(key)
        tick = int(t // self._tick_s)
        if tick != self._last_tick:
            if self._last_tick >= 0 and any(self._tick_counts):
                self.herd_max.append(max(self._tick_counts))
            self._tick_counts = [0] * len(self._tick_counts)
            self._last_tick = tick
        self._tick_counts[k] += 1
        if snaps[k].waiting > 0:
            self.busy_engine += 1

    def engine(self, k: int, t: float, inst: Instance) -> None:
        if not self.lo_s <= t < self.hi_s:
            return
        t0, v = self.queue_last[k]
        self.queue_area[k] += v * (t - t0)
        w = inst.num_waiting
        self.queue_last[k] = (t, w)
        self.queue_max[k] = max(self.queue_max[k], w)

    def summary(self, missed_ttft: set[int], evicted_blocks: list[int]) -> dict[str, float]:
        span = self.hi_s - self.lo_s
        mean_q = [a / span for a in self.queue_area]
        herd = np.asarray(self.herd_max, dtype=np.float64)
        n = max(1, self.dispatches)
        return {
            "dispatches": self.dispatches,
            "doomed_at_dispatch_share": len(self.doomed) / n,
            "to_engine_with_waiting_share": self.busy_engine / n,
            "doomed_that_missed_share": len(self.doomed & missed_ttft) / max(1, len(self.doomed)),
            "missed_ttft_share": len(missed_ttft) / n,
            "engine_waiting_mean": float(np.mean(mean_q)),
            "engine_waiting_mean_max_instance": float(np.max(mean_q)),
            "engine_waiting_peak": float(np.max(self.queue_max)),
            "herd_mean_max_per_scrape": float(herd.mean()) if herd.size else math.nan,
            "herd_p99_max_per_scrape": float(np.percentile(herd, 99)) if herd.size else math.nan,
            "evicted_blocks_total": float(sum(evicted_blocks)),
        }

"""The router state the picker and the simulator share (:class:`RouterCore`): dispatch ledger,
staleness, online prefill-rate learning, saturation.

What the picker deploys is what the simulator scores: both build their endpoint snapshots,
charge and release the ledger, learn prefill rates and decide saturation through one
:class:`RouterCore`. Only the inputs differ -- the picker reads scraped ``/metrics`` and its
prefix index, the simulator reads its simulated engines' gauges at the same scrape interval and
their prefix caches.

* **Ledger** (:class:`~smetric.router.ledger.DispatchLedger`): charged at dispatch with
  :func:`~smetric.router.work.dispatch_work` (computed tokens' cost, fetch seconds apart),
  released at the first token.
* **Staleness**: an endpoint whose gauges are older than ``staleness_s`` (or that its source
  reports stale, e.g. the last scrape failed) is marked ``stale``; policies treat it as
  saturated and never pick it while a fresh one exists.
* **Prefill rate** (:class:`~smetric.router.prefill_rate.PrefillRateEstimator`): one sample per
  first token, ``cost of the computed tokens / observed TTFT``.
* **Saturation** (GIE's detector): an endpoint has capacity when it is fresh,
  ``waiting <= queue_depth`` and ``kv_usage <= kv_util``; when none has, a sheddable request is
  shed (the picker answers 429).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from smetric.core.costmodel import CostModel
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.router.ledger import DispatchLedger, LedgerEntry
from smetric.router.prefill_rate import PrefillRateEstimator
from smetric.router.work import DispatchWork, dispatch_work, estimated_global_hit

DEFAULT_STALENESS_S = 2.0


class Gauges(Protocol):
    """The scraped engine gauges the router reads (vLLM's ``num_requests_running``,
    ``num_requests_waiting``, ``kv_cache_usage_perc``, the KV pool size) and when they were read."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def kv_usage(self) -> float: ...
    @property
    def kv_capacity_tokens(self) -> int: ...
    @property
    def scraped_at_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ScrapedGauges:
    """A plain :class:`Gauges` value (the simulator's scrape)."""

    running: int
    waiting: int
    kv_usage: float
    kv_capacity_tokens: int
    scraped_at_s: float


@dataclass(frozen=True, slots=True)
class Saturation:
    """GIE saturation-detector thresholds (its defaults)."""

    queue_depth: int = 5
    kv_util: float = 0.8


class RouterCore:
    """Router-side state of one router (one picker replica, or one simulated run)."""

    __slots__ = ("cost_model", "global_fetch_s_per_token", "ledger", "rates", "saturation", "staleness_s")

    def __init__(
        self,
        cost_model: CostModel,
        *,
        ledger: DispatchLedger | None = None,
        rates: PrefillRateEstimator | None = None,
        saturation: Saturation | None = None,
        staleness_s: float = DEFAULT_STALENESS_S,
        global_fetch_s_per_token: float | None = None,
    ) -> None:
        self.cost_model = cost_model
        self.ledger = ledger if ledger is not None else DispatchLedger()
        self.rates = rates if rates is not None else PrefillRateEstimator()
        self.saturation = saturation if saturation is not None else Saturation()
        self.staleness_s = staleness_s
        self.global_fetch_s_per_token = global_fetch_s_per_token

    # ------------------------------------------------------------------ decision inputs
    def global_hit(self, request: RequestView) -> int:
        """g when the router cannot see the global tier's content (see :func:`estimated_global_hit`)."""
        return estimated_global_hit(request, self.global_fetch_s_per_token)

    def snapshots(
        self,
        addresses: Iterable[str],
        hits: Mapping[str, int],
        metrics_of: Callable[[str], Gauges | None],
        now_s: float,
        *,
        is_stale: Callable[[str], bool] | None = None,
        scraped_at_s: float | None = None,
        global_hit_tokens: int = 0,
        tier: Callable[[str], tuple[str, float]] | None = None,
    ) -> list[EndpointSnapshot]:
        """One snapshot per address (the hot loop: every lookup bound once outside it).

        ``tier`` (smetric-tiered only): ``address -> (node, session_kv_tokens)``, set in the same
        pass so the snapshots are not built twice.

        An address without gauges is stale with zero load; ``is_stale`` (the source's own
        judgement, e.g. a failed last scrape) replaces the age check when given, else
        ``scraped_at_s`` (a scraper that reads every endpoint at once, the simulator's) replaces
        the per-endpoint scrape times.
        """
        tokens, costs = self.ledger.totals()
        fetches = self.ledger.fetch_totals()
        q_tokens, q_cost, q_fetch, hit_of, speed = (
            tokens.get,
            costs.get,
            fetches.get,
            hits.get,
            self.rates.speed,
        )
        max_age, g = self.staleness_s, global_hit_tokens
        all_stale = None if is_stale is not None or scraped_at_s is None else now_s - scraped_at_s > max_age
        out: list[EndpointSnapshot] = []
        append = out.append
        for a in addresses:
            node, session_kv = tier(a) if tier is not None else ("", 0.0)
            m = metrics_of(a)
            if m is None:
                append(
                    EndpointSnapshot(
                        a,
                        hit_of(a, 0),
                        q_tokens(a, 0.0),
                        q_cost(a, 0.0),
                        prefill_speed=speed(a),
                        stale=True,
                        global_hit_tokens=g,
                        queued_fetch_s=q_fetch(a, 0.0),
                        node=node,
                        session_kv_tokens=session_kv,
                    )
                )
                continue
            if all_stale is not None:
                stale = all_stale
            else:
                stale = is_stale(a) if is_stale is not None else now_s - m.scraped_at_s > max_age
            append(
                EndpointSnapshot(
                    name=a,
                    local_hit_tokens=hit_of(a, 0),
                    queued_prefill_tokens=q_tokens(a, 0.0),
                    queued_prefill_cost=q_cost(a, 0.0),
                    running=m.running,
                    waiting=m.waiting,
                    kv_usage=m.kv_usage,
                    kv_capacity_tokens=m.kv_capacity_tokens,
                    prefill_speed=speed(a),
                    stale=stale,
                    global_hit_tokens=g,
                    queued_fetch_s=q_fetch(a, 0.0),
                    node=node,
                    session_kv_tokens=session_kv,
                )
            )
        return out

    def has_capacity(self, s: EndpointSnapshot) -> bool:
        sat = self.saturation
        return not s.stale and s.waiting <= sat.queue_depth and s.kv_usage <= sat.kv_util

    def shed(self, request: RequestView, snapshots: Sequence[EndpointSnapshot]) -> bool:
        """Whether to shed ``request``: it is sheddable and no endpoint has capacity."""
        return request.sheddable and not any(self.has_capacity(s) for s in snapshots)

    # ------------------------------------------------------------------ ledger
    def work(self, request: RequestView, snapshot: EndpointSnapshot) -> DispatchWork:
        """What dispatching ``request`` to ``snapshot``'s endpoint costs it (the ledger fix)."""
        return dispatch_work(
            self.cost_model,
            request.prompt_tokens,
            snapshot.local_hit_tokens,
            snapshot.global_hit_tokens,
            self.global_fetch_s_per_token,
        )

    def dispatch(self, request_id: Hashable, address: str, work: DispatchWork) -> None:
        self.ledger.add(request_id, address, work.computed_tokens, work.cost_s, work.fetch_s)

    def prefill_done(self, request_id: Hashable) -> LedgerEntry | None:
        """Release a request's ledger entry (idempotent)."""
        return self.ledger.remove(request_id)

    # ------------------------------------------------------------------ learning
    def observed_cost_s(self, prompt_tokens: float, cached_tokens: float) -> float:
        """Cost of a prefill as it happened: the engine's reported cached tokens (local and
        global-tier hits, as vLLM's ``cached_tokens``) were not computed."""
        L = max(0.0, float(prompt_tokens))
        return self.cost_model.cost(L - min(max(0.0, float(cached_tokens)), L), L)

    def observe_first_token(self, address: str, cost_s: float, ttft_s: float) -> bool:
        """One prefill-rate sample (``False`` if it was unusable and ignored)."""
        return self.rates.observe(address, cost_s, ttft_s)

"""Decision assembly: endpoints + metrics + prefix hits + ledger -> snapshots -> policy -> :class:`Pick`.

Synchronous and allocation-light: it runs on the event loop between two gRPC messages, so it
never awaits. The router-side state -- dispatch ledger, staleness, prefill-rate estimate,
saturation -- is :class:`smetric.router.RouterCore`, the same code the simulator runs.
Saturation (GIE's detector): an endpoint has capacity when its metrics are fresh,
``waiting <= queueDepthThreshold`` and ``kv_usage <= kvCacheUtilThreshold``; when none has
capacity a sheddable request gets 429 and any other request is routed as usual.

Ledger charge (:func:`smetric.router.dispatch_work`): the cost of the tokens the endpoint will
really compute, ``L - max(c[i], g)``, where ``g`` is the session's previous turn when a fully
provisioned global tier is configured (``globalFetchSPerToken``), else 0; the fetch seconds of
the ``max(c, g) - c`` tokens loaded from the global tier are recorded apart.

PD disaggregation (llm-d convention): when the pool has both ``prefill`` and ``decode`` pods the
prefill pod is chosen by the policy in ``disaggregated`` mode over the prefill pods, the decode
pod by least load (``running + waiting``, then KV usage, then address) over the decode pods; the
destination is the decode pod and the prefill pod goes in ``x-prefiller-host-port``. A pool
without both roles is routed colocated over all endpoints (documented fallback). Selective P/D
(``pdDisaggregation.nonCachedTokens``, :mod:`smetric.policy.selective_pd`): the decode pod is
chosen first, by the policy in colocated mode, and the prefill hop is skipped (no prefill header,
the decode pod's ledger is charged) when the prompt's part it does not hold is short.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from smetric.core.costmodel import CostModel
from smetric.core.names import ROLE_DECODE, ROLE_PREFILL
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.epp.contracts import EndpointInfo, EndpointSource, PrefixIndex, PromptKey
from smetric.epp.parse.errors import RequestError
from smetric.epp.server.affinity import ResponseAffinity
from smetric.epp.server.feedback import PickerFeedback
from smetric.epp.server.flow import Held
from smetric.epp.server.outlier import OutlierDetector
from smetric.epp.server.sessions import PickerSessions
from smetric.epp.server.tier_facts import TierFacts
from smetric.policy.base import Decision
from smetric.policy.flowcontrol import FlowGate
from smetric.policy.framework import NoEndpointError, Router
from smetric.policy.selective_pd import PdDecider
from smetric.router import DispatchLedger, PrefillRateEstimator, RouterCore, Saturation

__all__ = ["Pick", "Picker", "Saturation"]


@dataclass(frozen=True, slots=True)
class Pick:
    """Where one request goes. ``prefill`` is the PD prefill pod ("" when colocated);
    ``ledger_address`` is where its prefill work was queued (the prefill pod, else the destination)."""

    destination: str
    fallbacks: tuple[str, ...]
    reason: str
    policy: str
    prefill: str
    ledger_address: str
    local_hit_tokens: int
    uncached_tokens: int
    cost_s: float
    prompt_tokens: int = 0  # in the units the decision used (the index's tokens when it tokenizes)
    fetched_tokens: int = 0  # loaded from the global tier (not computed)
    fetch_s: float = 0.0  # their global-tier fetch time (kept apart from cost_s)


class Picker(PickerFeedback):
    """One per picker replica; holds the ledger and the rate estimate, everything else is read.
    The servicer reports responses through its feedback hooks (:class:`~smetric.epp.server.hooks.ResponseHooks`,
    implemented in :class:`~smetric.epp.server.feedback.PickerFeedback`)."""

    def __init__(
        self,
        source: EndpointSource,
        index: PrefixIndex,
        router: Router,
        cost_model: CostModel,
        *,
        pd_router: Router | None = None,
        ledger: DispatchLedger | None = None,
        rates: PrefillRateEstimator | None = None,
        saturation: Saturation | None = None,
        staleness_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        global_fetch_s_per_token: float | None = None,
        tier_facts: TierFacts | None = None,
        is_stale: Callable[[str], bool] | None = None,
        pd_decider: PdDecider | None = None,
        on_dispatch: Callable[[str], None] | None = None,
        responses: ResponseAffinity | None = None,
        outliers: OutlierDetector | None = None,
        flow_gate: FlowGate | None = None,
    ) -> None:
        """``is_stale``: the source's own staleness judgement when it knows more than the scrape
        age (the datastore: a failed last scrape is stale at once); ``None`` = the scrape age.
        ``on_dispatch``: told each endpoint a request is sent to (the datastore counts them
        against ``--max-requests-per-scrape``).
        ``pd_decider``: selective P/D (``pdDisaggregation.nonCachedTokens``).
        ``responses``: the Responses follow-up map (:mod:`smetric.epp.server.affinity`); ``None``
        routes follow-ups by the policy alone.
        ``outliers``: passive outlier detection (:mod:`smetric.epp.server.outlier`): an ejected or
        probing endpoint is stale to the decision (left out while another is usable)."""
        self.source = source
        self.responses = responses
        self.on_dispatch = on_dispatch
        self.flow_gate = flow_gate  # flow control on: no endpoint with capacity -> Held
        # flowControl.sessionMissShare: admission by session in front of the gate (None: off)
        self.sessions = PickerSessions.from_config(flow_gate.config, clock) if flow_gate is not None else None
        self.tier_facts = tier_facts  # g, nodes and footprint for smetric(-tiered) (None otherwise)
        self.index = index
        self.router = router
        self.pd_router = pd_router
        self.pd_decider = pd_decider if pd_decider is not None and pd_decider.selective else None
        self.core = RouterCore(
            cost_model,
            ledger=ledger,
            rates=rates if rates is not None else PrefillRateEstimator(pool_prior=True),
            saturation=saturation,
            staleness_s=staleness_s,
            global_fetch_s_per_token=global_fetch_s_per_token,
        )
        self.clock = clock
        self._source_is_stale = is_stale
        self.outliers = outliers if outliers is not None and outliers.settings.enabled else None
        self._is_stale = is_stale if self.outliers is None else self._excluded_or_stale
        # The policy's last decision and the candidates it indexes (the prefill pods in PD mode):
        # references only, read by the decision log right after :meth:`pick` (:meth:`top_scores`).
        self.last_decision: Decision | None = None
        self.last_candidates: Sequence[EndpointSnapshot] = ()

    # The core's parts, under the names the servicer and the tests use.
    @property
    def ledger(self) -> DispatchLedger:
        return self.core.ledger

    @property
    def rates(self) -> PrefillRateEstimator:
        return self.core.rates

    @property
    def cost_model(self) -> CostModel:
        return self.core.cost_model

    @property
    def saturation(self) -> Saturation:
        return self.core.saturation

    @property
    def staleness_s(self) -> float:
        return self.core.staleness_s

    def snapshots(
        self,
        endpoints: Sequence[EndpointInfo],
        hits: dict[str, int],
        global_hit_tokens: int = 0,
        tier: Callable[[str], tuple[str, float]] | None = None,
    ) -> list[EndpointSnapshot]:
        """One snapshot per endpoint (:meth:`RouterCore.snapshots`)."""
        return self.core.snapshots(
            [ep.address for ep in endpoints],
            hits,
            self.source.metrics,
            self.clock(),
            is_stale=self._is_stale,
            global_hit_tokens=global_hit_tokens,
            tier=tier,
        )

    def _excluded_or_stale(self, address: str) -> bool:
        """Ejected by outlier detection, or stale by the source's judgement (else the scrape age)."""
        assert self.outliers is not None
        if self.outliers.excluded(address):
            return True
        if self._source_is_stale is not None:
            return self._source_is_stale(address)
        m = self.source.metrics(address)
        return m is None or self.clock() - m.scraped_at_s > self.core.staleness_s

    def has_capacity(self, s: EndpointSnapshot) -> bool:
        return self.core.has_capacity(s)

    def pick(
        self,
        request: RequestView,
        prompt_text: str,
        token_ids: Sequence[int] = (),
        subset_ips: frozenset[str] | None = None,
        key: PromptKey | None = None,
        previous_response_id: str = "",
        waited_s: float | None = None,
    ) -> Pick:
        """Choose endpoints and record the dispatch in the ledger. Raises :class:`RequestError`
        (503 no endpoint, 429 shed). ``key``: the prompt's index key when the caller computed it
        already (the servicer does, off the event loop, for large bodies).
        ``previous_response_id``: a Responses follow-up goes to the endpoint that served that
        response when it is a ready, fresh candidate (colocated pools), ahead of the policy's
        choice, which becomes its first fallback. ``waited_s``: with flow control on, how long the
        request has waited in its queue; raises :class:`Held` when no endpoint has capacity
        (``None``: no gate)."""
        pool: Sequence[EndpointInfo] = self.source.ready_endpoints()
        endpoints = pool
        if subset_ips is not None:
            endpoints = [ep for ep in endpoints if ep.ip.strip("[]") in subset_ips]
        if not endpoints:
            raise RequestError(
                503, "no ready endpoint" + (" in the subset hint" if subset_ips is not None else "")
            )
        if key is None:
            key = self.index.key(prompt_text, token_ids or None)
        exact = key.exact_tokens or bool(key.token_ids)
        if exact and request.prompt_tokens > 0 and key.prompt_tokens != request.prompt_tokens:
            # A tokenizing (precise) index knows the real length: use it, and scale the chars/4
            # estimate of est_hit by the same factor so c[i] and est_hit share units.
            scale = key.prompt_tokens / request.prompt_tokens
            request = dataclasses.replace(
                request, prompt_tokens=key.prompt_tokens, est_hit_tokens=round(request.est_hit_tokens * scale)
            )
        hits = self.index.local_hits(key, [ep.address for ep in endpoints])
        tier = self.tier_facts
        if tier is None:
            snaps = self.snapshots(endpoints, hits, self.core.global_hit(request))
        else:  # smetric(-tiered): g from the global-tier index, node and footprint in one pass
            facts = tier.facts_of(endpoints) if tier.node_facts else None
            snaps = self.snapshots(endpoints, hits, tier.global_hit(key), facts)
        if self.core.shed(request, snaps):
            raise RequestError(429, "all endpoints are saturated and the request is sheddable")
        if self.flow_gate is not None and waited_s is not None:
            if self.sessions is not None:
                self.sessions.admit(request)
            snaps = self._gated(self.flow_gate, request, endpoints, snaps, waited_s)
        if self.pd_router is not None:
            pick = self._pick_pd(request, endpoints, snaps)
        else:
            pick = self._pick_colocated(request, snaps, self._holder(previous_response_id))
        if pick is None:
            raise RequestError(503, "no ready endpoint")
        self.core.ledger.add(
            request.request_id, pick.ledger_address, pick.uncached_tokens, pick.cost_s, pick.fetch_s
        )
        self.index.on_routed(key, pick.ledger_address)
        if self.sessions is not None and waited_s is not None:
            self.sessions.dispatched(request, pick.uncached_tokens)
        if self.outliers is not None:  # a half-open endpoint's first request is its probe
            self.outliers.dispatched(pick.destination)
            if pick.ledger_address != pick.destination:
                self.outliers.dispatched(pick.ledger_address)
        if self.on_dispatch is not None:
            self.on_dispatch(pick.ledger_address)
            if pick.destination != pick.ledger_address:
                self.on_dispatch(pick.destination)
        if pick.prefill and pick.destination != pick.ledger_address:
            # P/D: the KV crosses to the decode pod, which then holds the prompt too (what lets
            # selective P/D keep the session's next turn there)
            self.index.on_routed(key, pick.destination)
        if tier is not None:  # the tokens it writes into the target's local tier: L - c
            tier.dispatched(
                key,
                pick.ledger_address,
                pick.uncached_tokens + pick.fetched_tokens,
                len(pool),  # the whole pool sizes the tier, not a subset hint
            )
        return pick

    def prompt_key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        """The prefix index's key of a prompt (the servicer computes it off the event loop for
        large bodies and hands it to :meth:`pick`)."""
        return self.index.key(prompt_text, token_ids)

    def top_scores(self, k: int = 4) -> list[dict[str, object]]:
        """The last decision's first ``k`` candidates in the policy's order (target, then
        fallbacks) with their scores (lower is better; ``None`` when the policy gives no score or
        it is not finite). Allocates; only the decision log calls it."""
        d = self.last_decision
        if d is None:
            return []
        names = self.last_candidates
        out: list[dict[str, object]] = []
        for i in (d.target, *d.fallbacks)[:k]:
            score = d.scores[i] if d.scores else None
            out.append(
                {
                    "endpoint": names[i].name,
                    "score": round(score, 6) if score is not None and math.isfinite(score) else None,
                }
            )
        return out

    def candidate_views(self, k: int = 16) -> list[dict[str, object]]:
        """The last decision's first ``k`` candidates in the pool's order, as the policy saw them:
        gauges (running, waiting), the ledger's queued prefill tokens, the local and global-tier
        hits, staleness and the age of the endpoint's last scrape (seconds on the picker's clock;
        ``None`` without a scrape). Allocates; only the decision log calls it."""
        now = self.clock()
        out: list[dict[str, object]] = []
        for s in self.last_candidates[:k]:
            m = self.source.metrics(s.name)
            out.append(
                {
                    "endpoint": s.name,
                    "running": s.running,
                    "waiting": s.waiting,
                    "queued_tokens": round(s.queued_prefill_tokens, 1),
                    "local_hit_tokens": s.local_hit_tokens,
                    "global_hit_tokens": s.global_hit_tokens,
                    "stale": s.stale,
                    "scrape_age_s": None if m is None else round(now - m.scraped_at_s, 6),
                }
            )
        return out

    def _decided(self, d: Decision, candidates: Sequence[EndpointSnapshot]) -> None:
        self.last_decision, self.last_candidates = d, candidates

    def _holder(self, previous_response_id: str) -> str | None:
        if not previous_response_id or self.responses is None:
            return None
        return self.responses.lookup(previous_response_id)

    def _pick_colocated(
        self, request: RequestView, snaps: list[EndpointSnapshot], holder: str | None = None
    ) -> Pick | None:
        try:
            d = self.router.pick(request, snaps)
        except NoEndpointError:
            return None
        if holder is not None:
            d = _pinned(d, snaps, holder)
        self._decided(d, snaps)
        return self._served_here(request, d, snaps[d.target], [snaps[i] for i in d.fallbacks])

    def _served_here(
        self,
        request: RequestView,
        d: Decision,
        target: EndpointSnapshot,
        fallbacks: Sequence[EndpointSnapshot],
    ) -> Pick:
        """The pick of an endpoint that computes the prompt itself (no prefill hop): the ledger is
        charged there with the work it really does."""
        w = self.core.work(request, target)
        return Pick(
            destination=target.name,
            fallbacks=tuple(s.name for s in fallbacks),
            reason=d.reason,
            policy=self.router.name,
            prefill="",
            ledger_address=target.name,
            local_hit_tokens=w.local_hit_tokens,
            uncached_tokens=w.computed_tokens,
            cost_s=w.cost_s,
            prompt_tokens=request.prompt_tokens,
            fetched_tokens=w.fetched_tokens,
            fetch_s=w.fetch_s,
        )

    def _gated(
        self,
        gate: FlowGate,
        request: RequestView,
        endpoints: Sequence[EndpointInfo],
        snaps: list[EndpointSnapshot],
        waited_s: float,
    ) -> list[EndpointSnapshot]:
        """Flow control's gate (:meth:`FlowGate.candidates`) over the endpoints whose TTFT it
        estimates: a P/D pool's prefill pods (its decode pods queue no prefill and would always
        look idle; the simulator's P/D pool is its prefill instances), every endpoint otherwise
        (selective P/D included: its decode pod may compute the prompt). Raises :class:`Held`
        when none can take the request, and on its first attempt (``waited_s`` 0) when no endpoint could serve it
        in time even idle (``hopelessLast``: it waits in the late band, :meth:`FlowGate.hopeless`); returns
        ``snaps`` with ``filterCandidates``' marks."""
        idx: Sequence[int] = range(len(snaps))
        if self.pd_router is not None and self.pd_decider is None:
            prefill = [i for i, ep in enumerate(endpoints) if ep.role == ROLE_PREFILL]
            if prefill and len(prefill) < len(endpoints):
                idx = prefill
        shown = [snaps[i] for i in idx]
        if waited_s <= 0.0 and gate.waits_last(request, shown):  # first attempt: queue it with the late ones
            raise Held(request, *gate.expiry(request), late=True)
        gated = gate.candidates(request, shown, waited_s)
        if gated is None:
            raise Held(request, *gate.expiry(request))
        if len(idx) == len(snaps):
            return gated
        out = list(snaps)
        for i, s in zip(idx, gated, strict=True):
            out[i] = s
        return out

    def _pick_pd(
        self, request: RequestView, endpoints: Sequence[EndpointInfo], snaps: list[EndpointSnapshot]
    ) -> Pick | None:
        assert self.pd_router is not None
        prefill = [s for ep, s in zip(endpoints, snaps, strict=True) if ep.role == ROLE_PREFILL]
        decode = [s for ep, s in zip(endpoints, snaps, strict=True) if ep.role == ROLE_DECODE]
        if not prefill or not decode:
            return self._pick_colocated(request, snaps)
        if self.pd_decider is not None:
            return self._pick_selective(request, prefill, decode)
        try:
            d = self.pd_router.pick(request, prefill)
        except NoEndpointError:
            return None
        self._decided(d, prefill)
        p = prefill[d.target]
        ranked = sorted(decode, key=lambda s: (s.stale, s.batch_size, s.kv_usage, s.name))
        return self._pd_pick(request, d, p, ranked)

    def _pick_selective(
        self, request: RequestView, prefill: list[EndpointSnapshot], decode: list[EndpointSnapshot]
    ) -> Pick | None:
        """Selective P/D: the decode pod first, by the configured policy in colocated mode (it may
        compute the prompt itself, so its cache and load both count); the prefill hop only when
        :func:`~smetric.policy.selective_pd.take_prefill_hop` says so for its hit."""
        assert self.pd_router is not None and self.pd_decider is not None
        try:
            dd = self.router.pick(request, decode)
        except NoEndpointError:
            return None
        target = decode[dd.target]
        ranked = [target, *(decode[i] for i in dd.fallbacks)]
        if not self.pd_decider.take_prefill_hop(request.prompt_tokens, target.local_hit_tokens):
            self._decided(dd, decode)
            return self._served_here(request, dd, target, ranked[1:])
        try:
            d = self.pd_router.pick(request, prefill)
        except NoEndpointError:
            return None
        self._decided(d, prefill)
        return self._pd_pick(request, d, prefill[d.target], ranked)

    def _pd_pick(
        self, request: RequestView, d: Decision, p: EndpointSnapshot, ranked: Sequence[EndpointSnapshot]
    ) -> Pick:
        assert self.pd_router is not None
        w = self.core.work(request, p)
        return Pick(
            destination=ranked[0].name,
            fallbacks=tuple(s.name for s in ranked[1:]),
            reason=d.reason,
            policy=self.pd_router.name,
            prefill=p.name,
            ledger_address=p.name,
            local_hit_tokens=w.local_hit_tokens,
            uncached_tokens=w.computed_tokens,
            cost_s=w.cost_s,
            prompt_tokens=request.prompt_tokens,
            fetched_tokens=w.fetched_tokens,
            fetch_s=w.fetch_s,
        )


PINNED_REASON = "previous-response"


def _pinned(d: Decision, snaps: Sequence[EndpointSnapshot], holder: str) -> Decision:
    """``d`` with ``holder`` first when it is a fresh candidate; the policy's order follows."""
    i = next((k for k, s in enumerate(snaps) if s.name == holder and not s.stale), None)
    if i is None:
        return d  # gone, stale or outside the subset: the policy's choice (documented fallback)
    ranked = tuple(k for k in (d.target, *d.fallbacks) if k != i)
    return dataclasses.replace(
        d, target=i, fallbacks=ranked[: max(1, len(d.fallbacks))], reason=PINNED_REASON
    )

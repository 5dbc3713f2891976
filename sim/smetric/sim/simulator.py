"""The discrete-event cluster simulator: one policy, one rate, one seed -> one result.

Event loop (a single heap, time-ordered, ties by insertion order):

* ``arrival``: a request is sent. Dropped requests (too long for the model) complete at once.
  Otherwise the router view is built, the policy (through :class:`smetric.policy.Router`, the
  very code the picker runs) picks an instance, the ledger records the dispatch and the
  instance gets the request.
* ``instance``: an instance's next internal state change (step end, decode-stretch end, load
  completion); a version number discards superseded entries.

Rejections: a request the chosen instance cannot hold (more KV blocks than its pool) is counted
as dropped with the reason ``engine_rejected`` and completes at once (an error answer); the run
goes on. ``work.dropped`` already filters what no instance can hold, so this is a guard.

Arrivals (``SimConfig.arrivals``, :mod:`smetric.sim.workload`): ``agents`` -- a fixed population
of agents, each starting its next family when every session of its current one has ended;
``stationary`` / ``cold`` -- Poisson family starts.

Closed loop: a session's next request is sent at
``max(family_start + offset, completion + think_time)`` (:mod:`smetric.trace.workload`), where
completion is the finish time (colocated) or, disaggregated (decode not simulated), the first
token plus ``(output - 1) * TPOT SLO`` (the decode pool assumed to meet its SLO).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable

from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineEvent, EngineRequest
from smetric.policy import Router, make_policy
from smetric.policy.registry import uses_node_facts, uses_tier_view
from smetric.policy.tiered_params import SMetricTieredParams
from smetric.sim.build import build_cluster, policy_params
from smetric.sim.calibrate import profiled_cost_model
from smetric.sim.config import SimConfig
from smetric.sim.gateway import OverloadProbe, SimGateway
from smetric.sim.metrics import LoadTracker
from smetric.sim.prewarm import prewarm_tier
from smetric.sim.requests import RequestTable
from smetric.sim.run_result import RunResult, family_metrics, request_metrics, request_records
from smetric.sim.tier_view import TierView
from smetric.sim.view import make_router_view
from smetric.sim.workload import PreparedWorkload
from smetric.trace import SteadyAgents, agents_for_rate

_ARRIVAL, _INSTANCE, _RETRY, _FLOW = 0, 1, 2, 3
# queued requests probed per gateway drain (every scrape tick while any wait) before it gives up
_DRAIN_PROBES = 4


class _Run:
    """One simulation run: the cluster, the router and its view, the event heap, the request table.

    Events are tuples ``(time_s, seq, kind, a, b)``: ``(t, seq, _ARRIVAL, key, family key)`` or
    ``(t, seq, _INSTANCE, instance, version)``; ``seq`` breaks time ties in insertion order.
    """

    __slots__ = (
        "agents",
        "cfg",
        "cluster",
        "colocated",
        "events",
        "fam_agent",
        "fam_done",
        "fam_left",
        "fam_start",
        "fam_uses",
        "flow_armed",
        "gateway",
        "heap",
        "horizon",
        "loads",
        "n",
        "n_agents",
        "n_fam",
        "preset",
        "probe",
        "reasons",
        "router",
        "seq",
        "table",
        "tier_view",
        "tpot_slo",
        "version",
        "view",
        "work",
    )

    def __init__(self, work: PreparedWorkload, policy: str, cfg: SimConfig) -> None:
        self.work = work
        self.cfg = cfg
        self.preset = preset = get_preset(cfg.preset_name)
        self.cluster = cluster = build_cluster(cfg, preset, work.block_tokens)
        params = policy_params(cfg, preset, work.block_tokens)
        self.router = Router(make_policy(policy, params))
        self.view = make_router_view(
            cfg.router_view,
            cluster,
            preset.cost_model,
            lambda: profiled_cost_model(preset, work.block_tokens),
            cfg.refresh_s,
            params.global_fetch_s_per_token,
            legacy_ledger=cfg.legacy_ledger,
        )
        # two-tier facts for a policy that reads them (smetric, smetric-tiered, X+pieces) and, with a global
        # tier, for every policy: the framework's g (the flow gate's estimate, the ledger's charge; framework_g)
        self.tier_view = (
            TierView(
                cluster,
                work.block_tokens,
                params.get(SMetricTieredParams).tiered.footprint_window_s,
                hits=cfg.tier_hits,
                chunk_tokens=cfg.global_chunk_tokens,
                node_facts=uses_node_facts(policy),
            )
            if uses_tier_view(policy)
            or (cfg.framework_g == "tier" and params.global_fetch_s_per_token is not None)
            else None
        )
        self.loads = LoadTracker(len(cluster), cfg.window_s)
        self.colocated = cfg.mode == "colocated"
        self.tpot_slo = preset.slo.tpot_s
        self.horizon = cfg.warmup_s + cfg.measure_s
        self.n = len(work)
        self.n_fam = work.n_families
        self.table = RequestTable()
        self.reasons: dict[str, int] = {}
        self.fam_start: dict[int, float] = {}  # clone * F + family -> start time
        self.agents: SteadyAgents | None = None
        self.fam_agent: dict[int, int] = {}  # clone * F + family -> agent running it (agents mode)
        self.fam_left: dict[int, int] = {}  # clone * F + family -> its sessions not yet ended
        self.fam_uses = [0] * work.n_families  # starts so far per family (the next clone id)
        self.n_agents = 0
        self.fam_done: dict[int, float] = {}  # clone * F + family -> when its last session ended
        fc = cfg.flow_control_config
        self.gateway = None if fc is None else SimGateway(fc[0], params, fc[1], cfg.seed)
        self.flow_armed = False  # a _FLOW tick is scheduled
        self.probe: OverloadProbe | None = None
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.version = [0] * len(cluster)
        self.events = 0

    # -- events -----------------------------------------------------------------------------------

    def seed_arrivals(self, families_per_s: float) -> None:
        """Every family's first sends (the rest follow completions, :meth:`completed`)."""
        work, cfg, n, n_fam, horizon = self.work, self.cfg, self.n, self.n_fam, self.horizon
        if cfg.arrivals == "agents":
            self.n_agents = agents_for_rate(families_per_s, work.mean_family_duration_s)
            self.agents = SteadyAgents(work.family_duration_s, self.n_agents, cfg.seed)
            warm: list[tuple[float, int]] = []
            for joined in self.agents.initial(cfg.agent_entry_window_s):
                self.start_family(joined.agent, joined.family, joined.start_s, joined.enter_s, warm)
            if cfg.prewarm_global_tier:
                prewarm_tier(self.cluster, work, self.tier_view, warm)
            heapq.heapify(self.heap)
            return
        lead_s = work.max_family_span_s if cfg.arrivals == "stationary" else 0.0
        for start, f, clone in work.family_arrivals(families_per_s, horizon, cfg.seed, lead_s):
            sends = work.first_sends(f, start)
            if sends:
                self.fam_start[clone * n_fam + f] = start
            for t_send, i in sends:
                if t_send < horizon:
                    self.seq += 1
                    self.heap.append((t_send, self.seq, _ARRIVAL, clone * n + i, clone * n_fam + f))
        heapq.heapify(self.heap)

    def start_family(
        self,
        agent: int,
        family: int,
        start_s: float,
        from_s: float | None = None,
        warm: list[tuple[float, int]] | None = None,
    ) -> None:
        """Agent ``agent`` starts (its next clone of) ``family`` at ``start_s``: push the first
        sends of its sessions due from ``from_s`` (default ``start_s``) on; a family with nothing
        left to send ends at its recorded end and the agent moves on. ``warm`` collects
        ``(recorded send time, key)`` of the last request each joined session sent before
        ``from_s`` (:func:`smetric.sim.prewarm.prewarm_tier`)."""
        work, n_fam = self.work, self.n_fam
        assert self.agents is not None
        for _ in range(work.n_families + 1):  # a started family always sends; this bounds the loop
            if start_s >= self.horizon:
                return
            clone = self.fam_uses[family]
            self.fam_uses[family] += 1
            fk = clone * n_fam + family
            self.family_taken(agent, fk)
            sends = work.first_sends(family, start_s, start_s if from_s is None else from_s)
            if sends:
                self.fam_start[fk] = start_s
                self.fam_agent[fk] = agent
                self.fam_left[fk] = len(sends)
                for t_send, i in sends:
                    p = int(work.prev[i])
                    if warm is not None and p >= 0:
                        warm.append((start_s + float(work.offset_s[p]), clone * self.n + p))
                    if t_send < self.horizon:
                        self.seq += 1
                        heapq.heappush(self.heap, (t_send, self.seq, _ARRIVAL, clone * self.n + i, fk))
                return
            warm = None
            # joined after its last send: the agent waits for its recorded end
            start_s = max(start_s + work.family_duration_s[family], start_s + 1e-9, from_s or 0.0)
            from_s = None
            family = self.agents.next_family(agent)
        raise RuntimeError(f"agent {agent}: no family sends a request")  # pragma: no cover

    def family_taken(self, agent: int, fk: int) -> None:
        """Agent ``agent`` took family key ``fk`` (a clone of a family) in :meth:`start_family`; a
        hook for recording runs (the differential harness), nothing here."""

    def joined_unwarmed(self, key: int) -> bool:
        """Whether request ``key`` is the first request of a session joined mid-way (its previous
        turn was never sent in this run) whose earlier turns no tier holds (the global tier is not
        pre-warmed, :func:`smetric.sim.prewarm.prewarm_tier`): the router then sees a fresh history
        (:func:`smetric.sim.workload.fresh_view`)."""
        clone, i = divmod(key, self.n)
        p = int(self.work.prev[i])
        if p < 0 or clone * self.n + p in self.table.by_key:
            return False
        cfg = self.cfg
        warmed = cfg.arrivals == "agents" and cfg.prewarm_global_tier and bool(self.cluster)
        return not (warmed and self.cluster[0].global_tier is not None)

    def run(self, progress: Callable[[float], None] | None) -> None:
        heap, version, cluster, view, horizon = self.heap, self.version, self.cluster, self.view, self.horizon
        next_progress = 60.0
        while heap:
            t, _, kind, a, b = heapq.heappop(heap)
            self.events += 1
            view.observe(t)
            if progress is not None and t >= next_progress:
                progress(min(1.0, t / horizon))
                next_progress = t + 60.0
            if kind == _INSTANCE:
                if b != version[a]:
                    continue  # superseded
                self.engine_events(cluster[a].advance(t))
                self.track(a, t)
                self.push_instance(a)
            elif kind == _ARRIVAL:
                self.arrival(a, t, b)
            elif kind == _RETRY:
                self.arrival(a, t, b, retry=True)
            else:
                self.flow_armed = False
                self.drain(t)
        if progress is not None:
            progress(1.0)

    def arrival(self, key: int, t: float, fk: int, retry: bool = False) -> None:
        """Send request ``key`` (of family ``fk``; ``retry``: the client resends it after a 429):
        route it and hand it to the chosen instance, or, with flow control, hold or shed it."""
        work = self.work
        i = key % self.n
        if not retry:
            self.table.add(key, t)
        if work.dropped[i]:
            self.completed(key, t)
            return
        req, rview = self.request(key)
        snaps = self.snapshots(req, rview, t)
        gw = self.gateway
        if gw is not None:
            # session_budget: a new session waits for a live one to go idle; the unit is the agent's
            # session (a family runs several)
            if not gw.admit_session(key, rview.session_id or fk, rview, snaps, t):
                self.shed(key, fk, "sessions", t)
                return
            if (gw.cfg.hopeless_last or gw.cfg.cold_last) and not retry:
                gw.mark_hopeless(key, rview, snaps)
            admitted = gw.admits(rview, snaps, gw.late(key))
            if admitted is None:
                if gw.hold(key, fk, rview, t):
                    self.drain(t)
                else:
                    self.shed(key, fk, "capacity", t)
                return
            snaps = admitted
        self.dispatch(key, req, rview, snaps, t)

    def request(self, key: int) -> tuple[EngineRequest, RequestView]:
        clone, i = divmod(key, self.n)
        return self.work.keyed_request(key), self.work.view(i, clone, fresh=self.joined_unwarmed(key))

    def snapshots(self, req: EngineRequest, rview: RequestView, t: float) -> list[EndpointSnapshot]:
        tv = self.tier_view
        if tv is not None and tv.sets_only_g:  # one pass, the same snapshots as enrich's copies
            return self.view.snapshots(req, rview, tv.global_hit(req))[1]
        _, snaps = self.view.snapshots(req, rview)
        if tv is not None:
            snaps = tv.enrich(snaps, req, t)
        return snaps

    def drain(self, t: float) -> None:
        """Flow control: shed what expired, then dispatch queued requests, fairly, while some
        instance can take them (at most :data:`_DRAIN_PROBES` refusals per call); keep a scrape
        tick armed while anything waits."""
        gw = self.gateway
        if gw is None:
            return
        for key, reason, _ in gw.queue.expire(t):
            self.shed(key, gw.flow_of.pop(key), reason, t)
        misses = 0
        while len(gw.queue) and misses < _DRAIN_PROBES:
            for key, flow, priority, enqueued_s in gw.queue.heads():
                if gw.late(key) and gw.queue.waiting_at_or_above(priority + 1):
                    break  # a late request goes only when no fresh one waits
                req, rview = self.request(key)
                admitted = gw.gate.candidates(rview, self.snapshots(req, rview, t), t - enqueued_s)
                if admitted is not None:
                    gw.queue.pop(flow, priority)
                    gw.flow_of.pop(key, None)
                    gw.waits.append(t - enqueued_s)
                    self.dispatch(key, req, rview, admitted, t)
                    break  # the instances changed: start again from the new fair order
                misses += 1
                if misses >= _DRAIN_PROBES:
                    break
            else:
                break
        if t > self.horizon + 2 * gw.cfg.ttl_s:  # past the drain allowance: nothing may wait on
            for key, reason, _ in gw.queue.expire(math.inf):
                self.shed(key, gw.flow_of.pop(key), reason, t)
        if len(gw.queue) and not self.flow_armed:
            self.flow_armed = True
            self.seq += 1
            # the next scrape tick, or the next expiry if sooner and still ahead
            t_next = t + self.cfg.refresh_s
            expiry = gw.queue.next_expiry_s()
            if t < expiry < t_next:
                t_next = expiry
            heapq.heappush(self.heap, (t_next, self.seq, _FLOW, 0, 0))

    def shed(self, key: int, fk: int, reason: str, t: float) -> None:
        """A 429: the client resends after Retry-After, or gives up (the session moves on)."""
        assert self.gateway is not None
        resend = self.gateway.shed(key, reason, t)
        if resend is None:
            self.completed(key, t)
        elif resend < self.horizon:
            self.seq += 1
            heapq.heappush(self.heap, (resend, self.seq, _RETRY, key, fk))

    def dispatch(
        self, key: int, req: EngineRequest, rview: RequestView, snaps: list[EndpointSnapshot], t: float
    ) -> None:
        """Route ``key`` now: the policy picks, the ledger is charged, the instance gets it."""
        row = self.table.by_key[key]
        tier_view = self.tier_view
        decision = self.router.pick(rview, snaps)
        k = decision.target
        row.instance = k
        self.reasons[decision.reason] = self.reasons.get(decision.reason, 0) + 1
        self.view.dispatched(key, k, rview, snaps[k], t)
        if self.gateway is not None:
            self.gateway.dispatched(key, snaps[k], rview.prompt_tokens)
        if self.probe is not None:
            self.probe.dispatched(key, t, rview, snaps, k)
        if tier_view is not None:
            tier_view.dispatched(snaps[k], rview, t, req.prompt_pieces, req.prompt_tokens)
        inst = self.cluster[k]
        if not inst.fits(req):  # more KV blocks than the pool: the engine refuses it
            row.rejected = True
            self.view.first_token(key, t, None)
            self.completed(key, t)
            return
        inst.submit(req, t)
        self.engine_events(inst.advance(t))
        self.track(k, t)
        self.push_instance(k)

    def push_instance(self, k: int) -> None:
        """Schedule instance ``k``'s next state change (superseding the one scheduled before)."""
        t_next = self.cluster[k].next_event_s()
        self.version[k] += 1
        if t_next < math.inf:
            self.seq += 1
            heapq.heappush(self.heap, (t_next, self.seq, _INSTANCE, k, self.version[k]))

    def completed(self, key: int, t: float) -> None:
        """Request ``key`` is done for its session at ``t``: schedule the session's next send."""
        work = self.work
        clone, i = divmod(key, self.n)
        j = int(work.next[i])
        fk = clone * self.n_fam + work.family_index[i]
        if self.gateway is not None:
            self.gateway.finished(key, t)
        if j < 0:
            self.session_ended(fk, t)
            return
        t_send = max(self.fam_start[fk] + float(work.offset_s[j]), t + float(work.think_s[j]))
        if t_send < self.horizon:
            self.seq += 1
            heapq.heappush(self.heap, (t_send, self.seq, _ARRIVAL, clone * self.n + j, fk))

    def session_ended(self, fk: int, t: float) -> None:
        """A session of family ``fk`` has sent and finished its last request at ``t``; when it was
        the family's last session, the family's agent starts its next family."""
        if self.agents is None:
            return
        left = self.fam_left[fk] - 1
        self.fam_left[fk] = left
        if left == 0:
            self.fam_done[fk] = t
            agent = self.fam_agent.pop(fk)
            self.start_family(agent, self.agents.next_family(agent), t)

    def engine_events(self, evs: list[EngineEvent]) -> None:
        by_key = self.table.by_key
        for e in evs:
            key = e.request.index
            row = by_key[key]
            if e.kind == "first_token":
                row.first_token_s = e.time_s
                row.local_hit_tokens = e.timing.local_hit_tokens
                row.global_hit_tokens = e.timing.global_hit_tokens
                self.view.first_token(key, e.time_s, e.timing)
                if not self.colocated:  # decode not simulated: it meets the TPOT SLO
                    self.completed(key, e.time_s + (e.request.output_tokens - 1) * self.tpot_slo)
            else:
                row.finish_s = e.time_s
                if self.colocated:
                    self.completed(key, e.time_s)

    def track(self, k: int, t: float) -> None:
        self.view.changed(k)
        inst = self.cluster[k]
        load = inst.num_running if self.colocated else inst.num_running + inst.num_waiting
        self.loads.update(k, t, load)
        if self.probe is not None:
            self.probe.engine(k, t, inst)

    # -- result -----------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float | int]:
        cfg, table = self.cfg, self.table
        out = request_metrics(cfg, self.preset.slo, self.work, table, self.loads)
        out.update(family_metrics(cfg, self.work, self.fam_start, self.fam_done))
        if self.gateway is not None:
            lo, hi = cfg.warmup_s, self.horizon
            out.update(self.gateway.metrics({r.key for r in table.rows if lo <= r.send_s < hi}))
            out["fc_enabled"] = 1
        return out


def simulate(
    work: PreparedWorkload,
    policy: str,
    families_per_s: float,
    cfg: SimConfig,
    *,
    rate_multiplier: float = 1.0,
    progress: Callable[[float], None] | None = None,
    keep_records: bool = False,
    probe: Callable[[_Run], OverloadProbe] | None = None,
) -> RunResult:
    """Run one policy at one family arrival rate; ``progress(fraction of horizon)`` is called
    about every simulated minute."""
    wall0 = time.perf_counter()
    run = _Run(work, policy, cfg)
    if probe is not None:
        run.probe = probe(run)
    run.seed_arrivals(families_per_s)
    run.run(progress)
    metrics = run.metrics()
    metrics["agents"] = run.n_agents
    return RunResult(
        policy=policy,
        rate_multiplier=rate_multiplier,
        families_per_s=families_per_s,
        requests_per_s=float(metrics["requests_per_s"]),
        metrics=metrics,
        events=run.events,
        sim_wall_s=time.perf_counter() - wall0,
        reasons=run.reasons,
        records=request_records(work, run.table) if keep_records else (),
    )

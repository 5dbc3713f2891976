"""Trace -> replay plan: the chosen session families, their start times and scaled token sizes.

Everything here is in *model* seconds (the trace's clock); the scheduler multiplies by the
time scale. Token counts are multiplied by ``token_scale`` (documented in docs/bench.md: the trace's
prompts, median ~104k tokens, are scaled down so one 2-core machine can tokenise, route and emulate
them in real time); outputs are scaled by the same factor, each at least one token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from smetric.trace.model import Trace, TraceRequest
from smetric.trace.workload import (
    SteadyAgents,
    agents_for_rate,
    family_durations_s,
    family_order,
    poisson_family_arrivals,
)

_MIN_PROMPT_TOKENS = 8


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    session_id: str
    turn: int
    offset_s: float  # on the family clock (model seconds)
    think_time_s: float  # after the previous response of the same session finished (model seconds)
    prompt_tokens: int  # scaled
    output_tokens: int  # scaled; sent as max_tokens
    system_tokens: int  # scaled; sizes the system message of a fresh history
    force_reset: bool  # the trace marks a context reset here (trigger "other")
    trace_index: int


@dataclass(frozen=True, slots=True)
class PlannedSession:
    session_id: str
    family_id: str
    parent_session_id: str | None
    requests: tuple[PlannedRequest, ...]
    model: str = ""  # the trace's model name (keys the optional shared system prompt)

    @property
    def start_offset_s(self) -> float:
        return self.requests[0].offset_s


@dataclass(frozen=True, slots=True)
class PlannedFamily:
    family_id: str
    start_s: float  # since the replay's start (model seconds); < 0 for a family already under way
    sessions: tuple[PlannedSession, ...]
    # requests due before this (start + offset < from_s) are not sent: the turns of a family that
    # was under way when the replay (or its agent) joined it
    from_s: float = 0.0

    def sends(self) -> bool:
        """Whether any request is due at ``from_s`` or later."""
        return any(self.start_s + r.offset_s >= self.from_s for s in self.sessions for r in s.requests)

    def instance(self, start_s: float, from_s: float, suffix: str) -> PlannedFamily:
        """This family started at ``start_s`` as its copy ``suffix`` (appended to the family and
        session ids, so a copy's synthesised messages and session header are its own)."""
        sessions = tuple(
            replace(
                s,
                requests=tuple(replace(r, session_id=r.session_id + suffix) for r in s.requests),
                session_id=s.session_id + suffix,
                family_id=s.family_id + suffix,
                parent_session_id=None if s.parent_session_id is None else s.parent_session_id + suffix,
            )
            for s in self.sessions
        )
        return PlannedFamily(self.family_id + suffix, start_s, sessions, from_s)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    families: tuple[PlannedFamily, ...]
    token_scale: float

    @property
    def n_requests(self) -> int:
        return sum(len(s.requests) for f in self.families for s in f.sessions)

    @property
    def n_sessions(self) -> int:
        return sum(len(f.sessions) for f in self.families)


@dataclass(frozen=True, slots=True)
class AgentPlan:
    """``n_agents`` concurrent agents in steady state (:class:`smetric.trace.SteadyAgents`, the
    simulator's generator): each agent joins at a uniform time in ``[0, entry_s)`` inside a family
    drawn in proportion to its recorded duration, at a uniform point of it (only its turns due from
    then on are sent), and starts its next family (drawn uniformly, from the agent's own Generator)
    when every session of the current one has sent and finished its last request. A family an agent
    joins after its last send ends at its recorded end. The n-th family of agent ``a`` runs as the
    copy ``~a<a>.<n>``, so two agents in one family never share a session.
    """

    families: tuple[PlannedFamily, ...]  # every family on its own clock (start 0)
    durations_s: tuple[float, ...]  # per family (same order): recorded duration
    n_agents: int
    seed: int
    entry_s: float  # agents join at uniform times in [0, entry_s) (0: all at t = 0)
    token_scale: float

    def __post_init__(self) -> None:
        if not self.families or len(self.families) != len(self.durations_s):
            raise ValueError("an agent plan needs one recorded duration per family, and a family")
        if self.n_agents < 1 or not (math.isfinite(self.entry_s) and self.entry_s >= 0):
            raise ValueError("an agent plan needs n_agents >= 1 and a finite entry_s >= 0")

    def agents(self) -> SteadyAgents:
        """A fresh generator (each replay of the plan draws the same families per agent)."""
        return SteadyAgents(self.durations_s, self.n_agents, self.seed)

    def family_for(self, family: int, agent: int, n: int, start_s: float, from_s: float) -> PlannedFamily:
        """Agent ``agent``'s ``n``-th family, started at ``start_s``, sending from ``from_s``."""
        return self.families[family].instance(start_s, from_s, f"~a{agent}.{n}")

    @property
    def n_sessions(self) -> int:
        return sum(len(f.sessions) for f in self.families)


def family_templates(
    trace: Trace, token_scale: float, max_turns: int = 0, max_request_tokens: int = 0
) -> tuple[PlannedFamily, ...]:
    """Every family of ``trace`` planned on its own clock (start 0), in :func:`family_order`."""
    order = family_order(trace)
    plan = build_plan(trace, order, dict.fromkeys(order, 0.0), token_scale, max_turns, max_request_tokens)
    by_id = {f.family_id: f for f in plan.families}
    return tuple(by_id[fid] for fid in order)


def agent_plan(
    trace: Trace,
    rate_per_s: float,
    seed: int,
    entry_s: float,
    token_scale: float,
    max_turns: int = 0,
    max_request_tokens: int = 0,
) -> AgentPlan:
    """Steady agents that offer ``rate_per_s`` families per second at light load:
    ``round(rate x mean recorded family duration)`` of them (:func:`agents_for_rate`)."""
    durations = family_durations_s(trace)
    families = family_templates(trace, token_scale, max_turns, max_request_tokens)
    d = tuple(durations[f.family_id] for f in families)
    n = agents_for_rate(rate_per_s, sum(d) / len(d) if d else 0.0)
    return AgentPlan(families, d, n, seed, entry_s, token_scale)


def stationary_plan(
    trace: Trace,
    rate_per_s: float,
    seed: int,
    horizon_s: float,
    token_scale: float,
    max_turns: int = 0,
    max_request_tokens: int = 0,
) -> ReplayPlan:
    """Poisson family starts at ``rate_per_s`` over ``[-lead, horizon_s)`` with ``lead`` = the
    longest family span (:func:`smetric.trace.poisson_family_arrivals`, the simulator's
    ``stationary``): a family under way at ``t = 0`` sends only its turns due from then on; clone
    ``k > 0`` of a family runs as the copy ``~k``."""
    families = family_templates(trace, token_scale, max_turns, max_request_tokens)
    if not families:
        raise ValueError(f"trace {trace.name!r} has no family to replay")
    spans = [max((r.offset_s for s in f.sessions for r in s.requests), default=0.0) for f in families]
    lead = max(spans)
    planned: list[PlannedFamily] = []
    for start, f, clone in poisson_family_arrivals(len(families), rate_per_s, horizon_s, seed, lead):
        if start + spans[f] < 0.0:
            continue  # over before the replay starts
        copy = families[f].instance(start, 0.0, f"~{clone}" if clone else "")
        if copy.sends():
            planned.append(copy)
    planned.sort(key=lambda f: (f.start_s, f.family_id))
    return ReplayPlan(tuple(planned), token_scale)


def scale_tokens(tokens: int, token_scale: float, minimum: int) -> int:
    return max(minimum, round(tokens * token_scale))


def _planned(r: TraceRequest, block_tokens: int, token_scale: float) -> PlannedRequest:
    return PlannedRequest(
        session_id=r.session_id,
        turn=r.turn,
        offset_s=max(0.0, float(r.offset_s)),
        think_time_s=max(0.0, float(r.think_time_s)),
        prompt_tokens=scale_tokens(r.prompt_tokens, token_scale, _MIN_PROMPT_TOKENS),
        output_tokens=scale_tokens(r.output_tokens, token_scale, 1),
        system_tokens=scale_tokens(r.system_blocks * block_tokens, token_scale, 0),
        force_reset=r.turn > 0 and r.trigger == "other",
        trace_index=r.index,
    )


def build_plan(
    trace: Trace,
    family_ids: Sequence[str],
    start_times_s: Mapping[str, float],
    token_scale: float,
    max_turns: int = 0,
    max_request_tokens: int = 0,
) -> ReplayPlan:
    """Plan the given families. ``max_turns`` > 0 keeps only each session's first turns.

    ``max_request_tokens`` > 0 (an instance's KV capacity, scaled): ``max_tokens`` is capped so
    prompt + output fit, and a request whose scaled prompt alone does not fit is left out (its
    session continues), as an engine would refuse it.

    Raises ``ValueError`` for an unknown family id, a missing start time or a bad scale.
    """
    if not 0 < token_scale <= 1:
        raise ValueError(f"token scale must be in (0, 1], got {token_scale}")
    families = trace.families()
    planned: list[PlannedFamily] = []
    for fid in family_ids:
        if fid not in families:
            raise ValueError(f"family {fid!r} is not in trace {trace.name!r}")
        if fid not in start_times_s:
            raise ValueError(f"no start time for family {fid!r}")
        by_session: dict[str, list[TraceRequest]] = {}
        for r in families[fid]:
            by_session.setdefault(r.session_id, []).append(r)
        sessions: list[PlannedSession] = []
        for sid, reqs in by_session.items():
            reqs.sort(key=lambda r: r.turn)
            if max_turns > 0:
                reqs = reqs[:max_turns]
            items = tuple(_planned(r, trace.block_tokens, token_scale) for r in reqs)
            if max_request_tokens > 0:
                items = tuple(
                    replace(p, output_tokens=min(p.output_tokens, max_request_tokens - p.prompt_tokens))
                    for p in items
                    if p.prompt_tokens < max_request_tokens
                )
            if not items:
                continue
            sessions.append(PlannedSession(sid, fid, reqs[0].parent_session_id, items, reqs[0].model))
        sessions.sort(key=lambda s: (s.start_offset_s, s.session_id))
        planned.append(PlannedFamily(fid, float(start_times_s[fid]), tuple(sessions)))
    planned.sort(key=lambda f: (f.start_s, f.family_id))
    return ReplayPlan(tuple(planned), token_scale)

"""Trace -> replay plan: the chosen session families, their start times and scaled token sizes.

Everything here is in *model* seconds (the trace's clock); the scheduler multiplies by the
time scale. Token counts are multiplied by ``token_scale`` (documented in docs/bench.md: the trace's
prompts, median ~104k tokens, are scaled down so one 2-core machine can tokenise, route and emulate
them in real time); outputs are scaled by the same factor, each at least one token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from smetric.trace.model import Trace, TraceRequest

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
    start_s: float  # since the replay's start (model seconds)
    sessions: tuple[PlannedSession, ...]


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

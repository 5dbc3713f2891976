"""Trace statistics behind the paper's §3 findings (reuse, locality, skew, arrival load)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from smetric.trace.model import Trace
from smetric.trace.reuse import ideal_reuse, request_times, weighted_quantile

PERCENTILES = (50, 90, 99)
# Without a global clock (agentic) the default assumption spreads all families over one hour,
# like the one-hour Mooncake and Azure windows.
DEFAULT_FAMILY_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Distribution:
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @staticmethod
    def of(values: npt.NDArray[np.int64] | npt.NDArray[np.float64]) -> Distribution:
        if not len(values):
            return Distribution(0.0, 0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = (float(v) for v in np.percentile(values, PERCENTILES))
        return Distribution(float(np.mean(values)), p50, p90, p99, float(np.max(values)))


@dataclass(frozen=True, slots=True)
class ReuseStats:
    """Shares are of reused tokens unless named otherwise (see :mod:`smetric.trace.reuse`)."""

    ideal_reuse: float  # reused / prompt tokens
    intra_session_share: float
    inter_session_share: float
    intra_family_share: float
    system_prompt_share: float
    first_turn_reuse_share: float
    reuse_interval_p50_s: float | None
    reuse_interval_p90_s: float | None
    reuse_within_100s_share: float | None
    distinct_blocks: int
    total_blocks: int
    reuse_clock: str


@dataclass(frozen=True, slots=True)
class TraceStats:
    name: str
    format: str
    requests: int
    sessions: int
    families: int
    block_tokens: int
    sessions_inferred: bool
    dropped_over_context: int
    skipped_malformed: int
    reuse: ReuseStats | None  # None when the trace has no hashes
    # Sessions and turns
    first_turn_share: float
    first_turn_token_share: float
    top25_session_token_share: float
    requests_per_session: Distribution
    # Lengths and triggers
    prompt_tokens: Distribution
    output_tokens: Distribution
    trigger_mix: dict[str, float]
    # Median recorded think time per trigger (empty when the format records none)
    think_time_p50_s_by_trigger: dict[str, float]
    # Arrival load
    arrival_assumption: str
    requests_per_s: float
    instances: int | None
    requests_per_min_per_instance: float | None
    notes: list[str] = field(default_factory=list)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _reuse_stats(trace: Trace) -> ReuseStats:
    reuse = ideal_reuse(trace)
    reused = reuse.reused_tokens
    intra = _share(reuse.intra_session_tokens, reused)
    values, weights = reuse.interval_s, reuse.interval_blocks
    total = int(weights.sum())
    return ReuseStats(
        ideal_reuse=_share(reused, reuse.prompt_tokens),
        intra_session_share=intra,
        inter_session_share=1.0 - intra if reused else 0.0,
        intra_family_share=_share(reuse.intra_family_tokens, reused),
        system_prompt_share=_share(reuse.system_tokens, reused),
        first_turn_reuse_share=_share(reuse.first_turn_reused_tokens, reused),
        reuse_interval_p50_s=weighted_quantile(values, weights, 0.5),
        reuse_interval_p90_s=weighted_quantile(values, weights, 0.9),
        reuse_within_100s_share=int(weights[values <= 100.0].sum()) / total if total else None,
        distinct_blocks=reuse.distinct_blocks,
        total_blocks=reuse.n_blocks,
        reuse_clock=(
            "recorded arrival times"
            if trace.recorded_family_starts_s
            else "intra-family clock (each family starts at 0, recorded offsets)"
        )
        + (
            "; a use ends at the recorded completion (arrival + latency)"
            if any(r.recorded_latency_s is not None for r in trace.requests)
            else "; a use ends at the request's arrival (no latencies recorded)"
        ),
    )


def _top_quarter_share(per_session: npt.NDArray[np.int64]) -> float:
    """Share of tokens from the top 25 % of sessions (ceil(n/4) sessions, by total tokens)."""
    if not len(per_session) or per_session.sum() == 0:
        return 0.0
    top = math.ceil(len(per_session) / 4)
    return float(np.sort(per_session)[::-1][:top].sum() / per_session.sum())


def _think_medians(trace: Trace) -> dict[str, float]:
    """Median recorded think time per trigger over follow-ups (empty if none is recorded)."""
    by_trigger: dict[str, list[float]] = {}
    for r in trace.requests:
        if r.prev_index >= 0 and r.think_time_recorded:
            by_trigger.setdefault(r.trigger, []).append(r.think_time_s)
    return {k: float(np.median(v)) for k, v in sorted(by_trigger.items())}


def _arrival_rate(trace: Trace, family_rate_per_s: float | None) -> tuple[float, str]:
    n_families = len({r.family_id for r in trace.requests})
    if trace.recorded_family_starts_s and family_rate_per_s is None:
        times = request_times(trace)
        span = float(times.max() - times.min()) if len(times) > 1 else 0.0
        if span <= 0:
            return 0.0, "recorded arrival times (zero span)"
        return len(times) / span, f"recorded arrival times over {span:.0f} s"
    rate = family_rate_per_s if family_rate_per_s is not None else n_families / DEFAULT_FAMILY_WINDOW_S
    per_family = len(trace.requests) / n_families if n_families else 0.0
    how = "given" if family_rate_per_s is not None else f"default: {n_families} families over 1 h"
    return rate * per_family, (
        f"Poisson family arrivals at {rate:.4g} families/s ({how}) x {per_family:.1f} requests/family "
        "(steady state)"
    )


def compute_stats(
    trace: Trace, *, instances: int | None = None, family_rate_per_s: float | None = None
) -> TraceStats:
    """All statistics of ``trace``; ``instances`` enables the per-instance arrival rate."""
    if instances is not None and instances <= 0:
        raise ValueError(f"instances must be positive, got {instances}")
    if family_rate_per_s is not None and not (math.isfinite(family_rate_per_s) and family_rate_per_s > 0):
        raise ValueError(f"family rate must be a positive number, got {family_rate_per_s}")
    reqs = trace.requests
    prompt = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
    output = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    first = np.array([r.turn == 0 for r in reqs], dtype=bool)
    session_tokens: Counter[str] = Counter()
    session_requests: Counter[str] = Counter()
    for r in reqs:
        session_tokens[r.session_id] += r.prompt_tokens + r.output_tokens
        session_requests[r.session_id] += 1
    triggers = Counter(r.trigger for r in reqs)
    rate, assumption = _arrival_rate(trace, family_rate_per_s)
    return TraceStats(
        name=trace.name,
        format=trace.format,
        requests=len(reqs),
        sessions=len(session_requests),
        families=len({r.family_id for r in reqs}),
        block_tokens=trace.block_tokens,
        sessions_inferred=trace.sessions_inferred,
        dropped_over_context=trace.dropped_over_context,
        skipped_malformed=trace.skipped_malformed,
        reuse=_reuse_stats(trace) if trace.has_hashes else None,
        first_turn_share=float(first.mean()) if len(reqs) else 0.0,
        first_turn_token_share=float(prompt[first].sum() / prompt.sum()) if prompt.sum() else 0.0,
        top25_session_token_share=_top_quarter_share(np.array(list(session_tokens.values()), np.int64)),
        requests_per_session=Distribution.of(np.array(list(session_requests.values()), np.int64)),
        prompt_tokens=Distribution.of(prompt),
        output_tokens=Distribution.of(output),
        trigger_mix={k: v / len(reqs) for k, v in triggers.most_common()},
        think_time_p50_s_by_trigger=_think_medians(trace),
        arrival_assumption=assumption,
        requests_per_s=rate,
        instances=instances,
        requests_per_min_per_instance=rate * 60.0 / instances if instances else None,
        notes=list(trace.notes),
    )


def stats_to_json(stats: TraceStats) -> dict[str, object]:
    """A JSON-ready dict: reuse fields flattened to the top level (null when there are no hashes)."""
    out = dataclasses.asdict(stats)
    reuse = out.pop("reuse")
    for f in dataclasses.fields(ReuseStats):
        out[f.name] = reuse[f.name] if reuse is not None else None
    return out

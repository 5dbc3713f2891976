"""Workload arrivals for replaying a trace: family start times and family-level subsampling.

A replay sends each request at

    send_time = max(family_start + offset_s, prev_completion + think_time_s)

where ``family_start`` comes from :class:`SteadyAgents` (a fixed population of concurrent agents,
each starting a new family when its last one ends, started in steady state), from
:func:`family_start_times` (seeded Poisson arrivals) or :func:`recorded_family_start_times`
(formats with a global clock), ``offset_s`` is the request's
recorded offset within its family, and ``prev_completion`` is when the *simulated/benchmarked*
completion of the same session's previous request (``prev_index``) happened (first turns: no
second term). This closed loop is enforced by the consumer (simulator, bench), not here, because
only the consumer knows completion times; :func:`closed_loop_send_time` is the rule as code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from smetric.trace.model import Trace, TraceRequest

# Stream key mixed into the seed so the workload's random numbers never coincide with another
# subsystem's Generator seeded with the same integer.
_ARRIVALS_STREAM = 0x5E55
_SUBSAMPLE_STREAM = 0xFA11
_AGENTS_STREAM = 0xA6E7
_FAMILY_ARRIVALS_STREAM = 0xA441


def family_order(trace: Trace) -> list[str]:
    """Family ids in order of first appearance in the trace."""
    return list(dict.fromkeys(r.family_id for r in trace.requests))


def family_start_times(trace: Trace, rate_per_s: float, seed: int) -> dict[str, float]:
    """Poisson arrivals of session families at ``rate_per_s`` families per second.

    Families are taken in file order; the k-th starts at the sum of k+1 exponential gaps of mean
    ``1 / rate_per_s`` (a Poisson process started at time 0), drawn from a Generator of its own.
    """
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ValueError(f"rate_per_s must be a positive finite number, got {rate_per_s}")
    families = family_order(trace)
    rng = np.random.default_rng([seed, _ARRIVALS_STREAM])
    starts = np.cumsum(rng.exponential(1.0 / rate_per_s, size=len(families)))
    return dict(zip(families, starts.tolist(), strict=True))


def poisson_family_arrivals(
    n_families: int, rate_per_s: float, horizon_s: float, seed: int, lead_s: float = 0.0
) -> list[tuple[float, int, int]]:
    """Poisson family arrivals in ``[-lead_s, horizon_s)`` as ``(start_s, family, clone)``.

    The n-th arrival replays family ``perm[n % n_families]`` (a seeded permutation of the family
    indices, redrawn every ``n_families`` arrivals) as its clone ``n // n_families``; the
    simulator's ``stationary`` (``lead_s`` = the longest family span) and ``cold`` (``lead_s = 0``)
    arrivals, and ``smetric bench``'s ``stationary``.
    """
    if n_families < 1:
        raise ValueError(f"n_families must be >= 1, got {n_families}")
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ValueError(f"rate must be a positive finite number of families/s, got {rate_per_s}")
    if not (math.isfinite(lead_s) and lead_s >= 0):
        raise ValueError(f"lead_s must be a finite number >= 0, got {lead_s}")
    rng = np.random.default_rng([seed, _FAMILY_ARRIVALS_STREAM])
    out: list[tuple[float, int, int]] = []
    t = -lead_s
    perm = rng.permutation(n_families)
    while True:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= horizon_s:
            return out
        n = len(out)
        if n and n % n_families == 0:
            perm = rng.permutation(n_families)
        out.append((t, int(perm[n % n_families]), n // n_families))


def family_durations_s(trace: Trace) -> dict[str, float]:
    """Each family's recorded duration, in :func:`family_order`: the latest ``offset + recorded
    latency`` of its requests (the offset alone where the latency is not recorded)."""
    out: dict[str, float] = {}
    for r in trace.requests:
        end = max(0.0, float(r.offset_s)) + max(0.0, float(r.recorded_latency_s or 0.0))
        out[r.family_id] = max(out.get(r.family_id, 0.0), end)
    return out


def agents_for_rate(rate_per_s: float, mean_duration_s: float) -> int:
    """Concurrent agents that offer ``rate_per_s`` families/s at light load (Little's law: families
    in progress = rate x mean duration), at least one."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ValueError(f"rate_per_s must be a positive finite number, got {rate_per_s}")
    if not (math.isfinite(mean_duration_s) and mean_duration_s >= 0):
        raise ValueError(f"mean_duration_s must be a finite number >= 0, got {mean_duration_s}")
    return max(1, round(rate_per_s * mean_duration_s))


@dataclasses.dataclass(frozen=True, slots=True)
class AgentStart:
    """Where an agent joins: at ``enter_s`` it is inside ``family``, which started at
    ``start_s <= enter_s`` (turns due before ``enter_s`` are not sent)."""

    agent: int
    family: int
    start_s: float
    enter_s: float = 0.0


class SteadyAgents:
    """``n_agents`` concurrent agents, each working through session families one after another.

    The load knob of a provider's peak hour: a fixed population of users, each starting a new
    family as soon as its previous one ends (its last request answered). The offered load cannot
    outgrow the population, and past saturation the closed loop slows every agent instead of piling
    up new families.

    Steady state: each agent joins inside a family drawn with probability proportional to its
    recorded duration, at a uniform point of it (the equilibrium of a renewal process: the family in
    progress at a random instant is length-biased and its age is uniform), i.e. that family started
    ``age`` before the agent joins. Agents join at uniform times in ``[0, entry_s)`` (0: all at
    ``t = 0``): a joining agent's session has no cached KV yet, so joining all at once would open
    the run with one uncached prefill per agent; spread over the warm-up, that cold start costs
    little. Later families are drawn uniformly. Every agent has its own
    Generator (``[seed, stream, agent]``), so an agent works through the same families whatever
    the policy and however long its families take.
    """

    __slots__ = ("_durations", "_rngs", "n_agents", "seed")

    def __init__(self, durations_s: Sequence[float], n_agents: int, seed: int) -> None:
        if not durations_s:
            raise ValueError("no families to draw from")
        if n_agents < 1:
            raise ValueError(f"n_agents must be >= 1, got {n_agents}")
        d = np.asarray(durations_s, dtype=np.float64)
        if not np.all(np.isfinite(d)) or (d < 0).any():
            raise ValueError("family durations must be finite and >= 0")
        self._durations = d
        self.n_agents = n_agents
        self.seed = seed
        self._rngs = [np.random.default_rng([seed, _AGENTS_STREAM, a]) for a in range(n_agents)]

    @property
    def n_families(self) -> int:
        return len(self._durations)

    def initial(self, entry_s: float = 0.0) -> list[AgentStart]:
        """Each agent's join time and family in progress then (call once, before
        :meth:`next_family`)."""
        if not (math.isfinite(entry_s) and entry_s >= 0):
            raise ValueError(f"entry_s must be a finite number >= 0, got {entry_s}")
        d = self._durations
        total = float(d.sum())
        weights = d / total if total > 0 else None
        out: list[AgentStart] = []
        for a, rng in enumerate(self._rngs):
            f = int(rng.choice(len(d), p=weights))
            age = float(rng.uniform(0.0, d[f]))
            enter = float(rng.uniform(0.0, entry_s)) if entry_s > 0 else 0.0
            out.append(AgentStart(a, f, enter - age, enter))
        return out

    def next_family(self, agent: int) -> int:
        """The family ``agent`` starts when its current one ends."""
        return int(self._rngs[agent].integers(len(self._durations)))


def recorded_family_start_times(trace: Trace) -> dict[str, float]:
    """The trace's own family start times (seconds since its first request)."""
    if not trace.recorded_family_starts_s:
        raise ValueError(
            f"trace {trace.name!r} ({trace.format or 'unknown format'}) has no global clock; "
            "use family_start_times(trace, rate_per_s, seed)"
        )
    return dict(trace.recorded_family_starts_s)


def closed_loop_send_time(
    family_start_s: float, offset_s: float, prev_completion_s: float | None, think_time_s: float
) -> float:
    """``max(family_start + offset, prev_completion + think_time)``; first turns pass None."""
    open_loop = family_start_s + offset_s
    if prev_completion_s is None:
        return open_loop
    return max(open_loop, prev_completion_s + think_time_s)


def subsample_families(trace: Trace, fraction: float, seed: int) -> Trace:
    """Keep a seeded random ``fraction`` of whole session families (every request of a kept family).

    At least one family is kept when the trace has any. Requests keep file order and are
    renumbered; ``prev_index`` links stay within their (kept) session.
    """
    if not (0 < fraction <= 1):
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    families = family_order(trace)
    n_keep = max(1, round(fraction * len(families))) if families else 0
    rng = np.random.default_rng([seed, _SUBSAMPLE_STREAM])
    chosen = {families[i] for i in rng.choice(len(families), size=n_keep, replace=False).tolist()}
    new_index: dict[int, int] = {}
    requests: list[TraceRequest] = []
    for r in trace.requests:
        if r.family_id not in chosen:
            continue
        new_index[r.index] = len(requests)
        prev = new_index[r.prev_index] if r.prev_index >= 0 else -1
        requests.append(_renumbered(r, len(requests), prev))
    return Trace(
        name=trace.name,
        block_tokens=trace.block_tokens,
        requests=requests,
        sessions_inferred=trace.sessions_inferred,
        has_sessions=trace.has_sessions,
        has_hashes=trace.has_hashes,
        notes=[
            *trace.notes,
            f"subsampled {n_keep} of {len(families)} session families (fraction {fraction}, seed {seed})",
        ],
        dropped_over_context=trace.dropped_over_context,
        skipped_malformed=trace.skipped_malformed,
        format=trace.format,
        recorded_family_starts_s={f: s for f, s in trace.recorded_family_starts_s.items() if f in chosen},
    )


def _renumbered(r: TraceRequest, index: int, prev_index: int) -> TraceRequest:
    if r.index == index and r.prev_index == prev_index:
        return r
    return dataclasses.replace(r, index=index, prev_index=prev_index)

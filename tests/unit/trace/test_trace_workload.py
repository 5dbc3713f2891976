"""Workload arrivals: steady agents, seeded Poisson family starts, closed-loop rule, family subsampling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smetric.trace.model import Trace, TraceRequest
from smetric.trace.workload import (
    SteadyAgents,
    agents_for_rate,
    closed_loop_send_time,
    family_durations_s,
    family_start_times,
    recorded_family_start_times,
    subsample_families,
)


def req(index: int, session: str, family: str, prev: int = -1, offset: float = 0.0) -> TraceRequest:
    return TraceRequest(
        index=index,
        session_id=session,
        family_id=family,
        parent_session_id=None,
        turn=0 if prev < 0 else 1,
        offset_s=offset,
        think_time_s=0.0,
        prompt_tokens=64,
        output_tokens=1,
        hash_ranges=np.array([[index, index]], dtype=np.int64),
        prev_index=prev,
    )


def make_trace(n_families: int) -> Trace:
    requests: list[TraceRequest] = []
    for f in range(n_families):
        first = len(requests)
        requests.append(req(first, f"f{f}", f"f{f}"))
        requests.append(req(first + 1, f"f{f}::sub", f"f{f}"))
        requests.append(req(first + 2, f"f{f}", f"f{f}", prev=first, offset=3.0))
    return Trace(name="t", block_tokens=64, requests=requests)


def test_poisson_starts_are_seeded_and_have_the_rate() -> None:
    trace = make_trace(2000)
    a = family_start_times(trace, rate_per_s=4.0, seed=7)
    assert a == family_start_times(trace, rate_per_s=4.0, seed=7)
    assert a != family_start_times(trace, rate_per_s=4.0, seed=8)
    starts = np.array(list(a.values()))
    assert list(a) == [f"f{i}" for i in range(2000)]
    assert np.all(np.diff(starts) > 0) and starts[0] > 0
    gaps = np.diff(np.concatenate(([0.0], starts)))
    assert gaps.mean() == pytest.approx(0.25, rel=0.1)  # 2000 exponential gaps of mean 1/4 s


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_rate_is_rejected(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        family_start_times(make_trace(1), rate_per_s=rate, seed=0)


def test_closed_loop_rule() -> None:
    assert closed_loop_send_time(10.0, 5.0, None, 2.0) == 15.0
    assert closed_loop_send_time(10.0, 5.0, 11.0, 2.0) == 15.0  # recorded offset is later
    assert closed_loop_send_time(10.0, 5.0, 14.5, 2.0) == 16.5  # predecessor finished late


def test_recorded_starts_require_a_clock() -> None:
    trace = make_trace(1)
    with pytest.raises(ValueError, match="no global clock"):
        recorded_family_start_times(trace)
    trace.recorded_family_starts_s = {"f0": 1.5}
    assert recorded_family_start_times(trace) == {"f0": 1.5}


def test_subsample_keeps_whole_families_and_relinks() -> None:
    trace = make_trace(10)
    sub = subsample_families(trace, fraction=0.3, seed=1)
    families = {r.family_id for r in sub}
    assert len(families) == 3 and len(sub) == 9
    assert [r.index for r in sub] == list(range(9))
    for r in sub:
        if r.prev_index >= 0:
            prev = sub.requests[r.prev_index]
            assert prev.session_id == r.session_id and prev.index < r.index
    again = subsample_families(trace, fraction=0.3, seed=1)
    assert [r.session_id for r in again] == [r.session_id for r in sub]
    assert any("subsampled 3 of 10" in n for n in sub.notes)
    assert len(subsample_families(trace, fraction=0.01, seed=1)) == 3  # at least one family
    with pytest.raises(ValueError, match="fraction"):
        subsample_families(trace, fraction=0.0, seed=1)


def test_agents_for_rate_is_littles_law() -> None:
    assert agents_for_rate(0.01, 10_341.4) == 103
    assert agents_for_rate(1e-6, 10.0) == 1  # at least one agent
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            agents_for_rate(bad, 10.0)
    with pytest.raises(ValueError):
        agents_for_rate(1.0, -1.0)


def test_family_durations_include_the_last_answer() -> None:
    t = make_trace(2)
    assert family_durations_s(t) == {"f0": 3.0, "f1": 3.0}  # latency not recorded: offsets only
    r = dataclasses.replace(t.requests[2], recorded_latency_s=2.5)
    t2 = Trace(name="t", block_tokens=64, requests=[*t.requests[:2], r, *t.requests[3:]])
    assert family_durations_s(t2)["f0"] == 5.5


def test_agents_are_seeded_and_each_has_its_own_stream() -> None:
    d = [10.0, 20.0, 30.0, 40.0]
    a, b = SteadyAgents(d, 5, seed=1), SteadyAgents(d, 5, seed=1)
    assert a.initial(100.0) == b.initial(100.0)
    assert SteadyAgents(d, 5, seed=1).initial(100.0) != SteadyAgents(d, 5, seed=2).initial(100.0)
    # agent 3's families do not depend on how often the others moved on
    a_seq = [a.next_family(3) for _ in range(20)]
    for _ in range(7):
        b.next_family(0)
    assert [b.next_family(3) for _ in range(20)] == a_seq
    for s in SteadyAgents(d, 50, seed=3).initial(100.0):
        assert 0.0 <= s.enter_s < 100.0
        assert s.enter_s - d[s.family] <= s.start_s <= s.enter_s
    with pytest.raises(ValueError):
        SteadyAgents(d, 0, seed=0)
    with pytest.raises(ValueError):
        SteadyAgents([], 3, seed=0)
    with pytest.raises(ValueError):
        SteadyAgents([1.0, -1.0], 3, seed=0)
    with pytest.raises(ValueError):
        SteadyAgents(d, 3, seed=0).initial(-1.0)


def test_the_family_in_progress_is_length_biased_with_a_uniform_age() -> None:
    starts = SteadyAgents([1.0, 9.0], 4_000, seed=0).initial()
    in_long = np.mean([s.family == 1 for s in starts])
    assert 0.87 < in_long < 0.93  # 9 / (1 + 9)
    ages = np.array([-s.start_s / (1.0, 9.0)[s.family] for s in starts])
    assert 0.47 < ages.mean() < 0.53 and ages.min() >= 0.0 and ages.max() <= 1.0


def _renewal_sends(
    durations: list[float], offsets: list[np.ndarray], agents: SteadyAgents, horizon: float, fresh: bool
) -> np.ndarray:
    """Open-loop send times in [0, horizon) of agents working through families back to back."""
    out: list[np.ndarray] = []
    for s in agents.initial():
        f, start = s.family, 0.0 if fresh else s.start_s
        while start < horizon:
            t = start + offsets[f]
            out.append(t[(t >= 0) & (t < horizon)])
            start += durations[f]
            f = agents.next_family(s.agent)
    return np.concatenate(out)


def test_agents_offer_a_steady_request_rate_from_t0() -> None:
    """The drift bound of the generator: families of 10 s to 2,000 s whose requests crowd their
    beginning; 2,000 agents; requests sent in the last quarter vs the first within 10 %. Agents
    that all begin a fresh family at t = 0 (no steady start) drift by far more."""
    rng = np.random.default_rng(5)
    durations = list(np.exp(rng.uniform(np.log(10.0), np.log(2_000.0), size=40)))
    offsets = [d * (np.arange(20) / 20.0) ** 2 for d in durations]  # front-loaded

    def drift(fresh: bool) -> float:
        t = _renewal_sends(durations, offsets, SteadyAgents(durations, 2_000, seed=1), 4_000.0, fresh)
        first, last = ((t >= 0) & (t < 1_000)).sum(), ((t >= 3_000) & (t < 4_000)).sum()
        return float(last / first - 1.0)

    assert abs(drift(fresh=False)) <= 0.10
    assert abs(drift(fresh=True)) > 0.10

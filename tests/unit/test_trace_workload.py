"""Workload arrivals: seeded Poisson family starts, closed-loop rule, family subsampling."""

from __future__ import annotations

import numpy as np
import pytest

from smetric.trace.model import Trace, TraceRequest
from smetric.trace.workload import (
    closed_loop_send_time,
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

"""Workload preparation: answer blocks, drops, clones with their own id namespace, arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from smetric.core.presets import get_preset
from smetric.sim.workload import max_request_tokens, prepare
from smetric.trace import Trace, TraceRequest

P30 = get_preset("qwen3-30b-h20")


def tr(
    index: int, fam: str, turn: int, prompt: int, ranges: list[list[int]], prev: int = -1, est: int = 0
) -> TraceRequest:
    return TraceRequest(
        index=index,
        session_id=fam,
        family_id=fam,
        parent_session_id=None,
        turn=turn,
        offset_s=float(turn),
        think_time_s=1.0,
        prompt_tokens=prompt,
        output_tokens=128,
        hash_ranges=np.array(ranges, dtype=np.int64),
        prev_index=prev,
        est_hit_tokens=est,
    )


def trace() -> Trace:
    reqs = [
        # family a: system prompt ids 1000-1001 shared with family b
        tr(0, "a", 0, 64 * 5, [[1000, 1001], [1, 3]]),
        tr(1, "a", 1, 64 * 8, [[1000, 1001], [1, 6]], prev=0, est=64 * 7),  # extends turn 0
        tr(2, "a", 2, 64 * 4, [[1000, 1001], [50, 51]], prev=1, est=64 * 4),  # compaction: no extension
        tr(3, "b", 0, 64 * 4, [[1000, 1001], [100, 101]]),
    ]
    return Trace(name="t", block_tokens=64, requests=reqs)


def test_answer_blocks_come_from_the_next_turn_that_extends_this_one() -> None:
    w = prepare(trace(), P30)
    assert w.engine[0].output_pieces == ((4, 5),)  # blocks 5..6 of turn 1 = turn 0's answer
    assert w.engine[1].output_pieces == ()  # turn 2 does not extend turn 1
    assert w.engine[3].output_pieces == ()  # no next turn
    assert list(w.next) == [1, 2, -1, -1]


def test_shared_ids_are_detected_and_kept_by_clones() -> None:
    w = prepare(trace(), P30)
    assert w.shared_from == 1000
    assert w.id_span == 1002
    c = w.engine_request(1, 2)
    assert c.prompt_pieces == ((1000, 1001), (1 + 2 * 1002, 6 + 2 * 1002))
    assert c.request_id.endswith("~2")
    assert w.engine_request(1, 0) is w.engine[1]
    v = w.view(1, 2)
    assert v.session_id == "a~2" and v.turn == 1 and v.est_hit_tokens == 64 * 7


def test_a_keyed_request_is_its_clones_request_indexed_by_the_run_key() -> None:
    w = prepare(trace(), P30)
    key = 2 * len(w) + 1  # request 1 as sent by clone 2
    r, c = w.keyed_request(key), w.engine_request(1, 2)
    assert r.index == key
    assert (r.request_id, r.prompt_tokens, r.output_tokens, r.prompt_pieces, r.output_pieces) == (
        c.request_id,
        c.prompt_tokens,
        c.output_tokens,
        c.prompt_pieces,
        c.output_pieces,
    )


def test_requests_over_the_limit_are_marked_dropped() -> None:
    limit = max_request_tokens(P30, 64)
    assert limit == min(P30.model.max_context_tokens, P30.kv_capacity_tokens // 64 * 64)
    reqs = [tr(0, "a", 0, limit, [[1, 2]]), tr(1, "b", 0, limit - 128, [[10, 11]])]
    w = prepare(Trace(name="t", block_tokens=64, requests=reqs), P30)
    assert w.dropped.tolist() == [True, False]
    assert w.n_dropped == 1


def test_the_limit_is_whole_blocks_of_the_trace() -> None:
    """217,680 tokens fit the pool's token capacity but need 3,402 blocks of 64 where one H20 holds
    3,401 (217,664 tokens): such a request is dropped up front, one of 217,664 is not."""
    assert P30.kv_capacity_tokens == 217_680
    assert max_request_tokens(P30, 64) == 3_401 * 64 == 217_664
    assert max_request_tokens(P30) == 217_680  # the preset's own 16-token blocks divide it
    reqs = [  # tr() adds 128 output tokens
        tr(0, "a", 0, 217_680 - 128, [[1, 2]]),
        tr(1, "b", 0, 217_664 - 128, [[10, 11]]),
    ]
    w = prepare(Trace(name="t", block_tokens=64, requests=reqs), P30)
    assert w.max_tokens == 217_664
    assert w.dropped.tolist() == [True, False]
    with pytest.raises(ValueError):
        max_request_tokens(P30, 0)


def test_family_arrivals_are_seeded_poisson_and_cycle_through_clones() -> None:
    w = prepare(trace(), P30)
    a = w.family_arrivals(0.5, 2_000.0, seed=7)
    assert a == w.family_arrivals(0.5, 2_000.0, seed=7)
    assert a != w.family_arrivals(0.5, 2_000.0, seed=8)
    assert 850 < len(a) < 1150  # ~ rate x horizon
    starts = [s for s, _, _ in a]
    assert starts == sorted(starts) and starts[-1] < 2_000.0
    for n in range(0, len(a) - 1, 2):  # every cycle of F=2 arrivals covers both families once
        if n + 1 < len(a):
            assert {a[n][1], a[n + 1][1]} == {0, 1}
            assert a[n][2] == a[n + 1][2] == n // 2
    with pytest.raises(ValueError):
        w.family_arrivals(0.0, 10.0, 0)


def test_lead_draws_family_starts_before_zero_and_first_sends_skip_past_turns() -> None:
    w = prepare(trace(), P30)
    assert w.family_span_s == (2.0, 0.0) and w.max_family_span_s == 2.0
    a = w.family_arrivals(0.5, 100.0, seed=1, lead_s=50.0)
    assert min(s for s, _, _ in a) < 0 <= max(s for s, _, _ in a)
    # family a (turns at offsets 0, 1, 2) started at -1.5: only turn 2 (due at 0.5) is sent
    assert w.first_sends(0, -1.5) == [(0.5, 2)]
    assert w.first_sends(0, -5.0) == []  # the whole family lies before 0
    assert w.first_sends(0, 3.0) == [(3.0, 0)]
    with pytest.raises(ValueError):
        w.family_arrivals(0.5, 10.0, 0, lead_s=-1.0)


def test_stationary_arrivals_keep_the_request_rate_flat() -> None:
    """Long families: with cold starts the request rate ramps up; with the lead it is flat."""
    reqs = []
    for f in range(20):  # 20 families of 40 turns, one every 100 s (a 3,900 s span)
        for k in range(40):
            i = len(reqs)
            # turn 100 k: tr() puts turn k at offset 100 k s
            reqs.append(tr(i, f"f{f}", 100 * k, 640, [[f * 1000 + k, f * 1000 + k]], prev=i - 1 if k else -1))
    w = prepare(Trace(name="long", block_tokens=64, requests=reqs), P30)

    def sends(lead_s: float) -> np.ndarray:
        # open loop: every turn of a kept session at start + offset
        out: list[float] = []
        for s, f, _ in w.family_arrivals(0.05, 4_000.0, 3, lead_s):
            for _, i in w.first_sends(f, s):
                j = i
                while j >= 0:
                    out.append(s + float(w.offset_s[j]))
                    j = int(w.next[j])
        return np.array([t for t in out if 0 <= t < 4_000.0])

    cold, warm = sends(0.0), sends(w.max_family_span_s)
    first, last = (cold < 1_000).sum(), ((cold >= 3_000) & (cold < 4_000)).sum()
    assert last > 2 * first  # the ramp the lead removes
    first, last = (warm < 1_000).sum(), ((warm >= 3_000) & (warm < 4_000)).sum()
    assert 0.7 < last / first < 1.4

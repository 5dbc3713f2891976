"""The per-endpoint estimates every policy shares, value by value (docs/mutation.md).

Cost model with an attention term (``cost(n, L) = 1e-3 n + 1e-6 n (L - n/2)``) so each estimate
depends on both the computed tokens and the prompt length; every expected value is computed here
from the documented formula, with a local hit ``c > 0`` wherever a fetch is charged (a fetch is
charged only for the tokens the endpoint does not already hold: ``(h - c) * fetch``).
"""

from __future__ import annotations

import math

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.estimates import (
    batch,
    decode_load_tokens,
    decode_step_s,
    global_hit,
    local_hit,
    nonneg,
    prefill_time_s,
    prefill_time_tokens_s,
    prompt_tokens,
    request_slo,
    session_hit,
    speed,
    tier_time_tokens_s,
    tier_times_s,
    tpot_guard_ok,
    ttft_tokens_with_global_tier_s,
    ttft_with_global_tier_s,
)

CM = CostModel(c_lin_s=1e-3, c_att_s=1e-6)
FETCH = 1e-4
REQ = RequestView("r", prompt_tokens=1000, turn=2, est_hit_tokens=700)


def cost(n: float, L: float) -> float:
    return 1e-3 * n + 1e-6 * n * (L - n / 2)


def ep(**kw: float | int | str) -> EndpointSnapshot:
    return EndpointSnapshot(name="e", **kw)  # type: ignore[arg-type]


def test_sanitising_helpers() -> None:
    assert [nonneg(x) for x in (2.5, 0.0, -1.0, math.nan, math.inf, -math.inf)] == [2.5, 0, 0, 0, 0, 0]
    for bad in (0.0, -2.0, math.nan, math.inf):
        assert speed(ep(prefill_speed=bad)) == 1.0
    assert speed(ep(prefill_speed=2.5)) == 2.5
    assert prompt_tokens(RequestView("r", prompt_tokens=-3)) == 0
    assert prompt_tokens(REQ) == 1000
    assert local_hit(REQ, ep(local_hit_tokens=-5)) == 0
    assert local_hit(REQ, ep(local_hit_tokens=1500)) == 1000
    assert local_hit(REQ, ep(local_hit_tokens=300)) == 300
    assert global_hit(REQ, ep(global_hit_tokens=-5)) == 0
    assert global_hit(REQ, ep(global_hit_tokens=1500)) == 1000
    assert global_hit(REQ, ep(global_hit_tokens=600)) == 600


def test_session_hit() -> None:
    assert session_hit(REQ, ep(local_hit_tokens=300)) == 700  # the previous turn from the tier
    assert session_hit(REQ, ep(local_hit_tokens=800)) == 800  # the local copy is longer
    long_hit = RequestView("r", prompt_tokens=500, est_hit_tokens=900)
    assert session_hit(long_hit, ep()) == 500
    assert session_hit(RequestView("r", prompt_tokens=500, est_hit_tokens=-9), ep(local_hit_tokens=10)) == 10
    assert session_hit(RequestView("r", prompt_tokens=500, est_hit_tokens=-9), ep()) == 0


def test_request_slo_overrides() -> None:
    p = PolicyParams(slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.5, tpot_s=0.02))
    assert request_slo(REQ, p) is p.slo
    ttft = request_slo(RequestView("r", 1000, ttft_slo_s=3.0), p)
    assert (ttft.ttft_slo_s(1000), ttft.tpot_s) == (3.0, 0.02)
    tpot = request_slo(RequestView("r", 1000, tpot_slo_s=0.05), p)
    assert (tpot.ttft_slo_s(1000), tpot.tpot_s) == (1.5, 0.05)


def test_prefill_time() -> None:
    e = ep(local_hit_tokens=300, queued_prefill_cost=0.25, prefill_speed=2.0, queued_prefill_tokens=400)
    assert prefill_time_s(REQ, e, CM) == pytest.approx((0.25 + cost(700, 1000)) / 2.0)
    assert prefill_time_s(REQ, ep(queued_prefill_cost=-1.0), CM) == pytest.approx(cost(1000, 1000))
    assert prefill_time_tokens_s(REQ, e, 2e-3) == pytest.approx((400 + 1000 - 300) * 2e-3 / 2.0)
    assert prefill_time_tokens_s(REQ, ep(queued_prefill_tokens=-5.0), 1e-3) == pytest.approx(1.0)


def test_tier_times_sync_charge_fetch_only_for_tokens_not_held() -> None:
    eps = [
        ep(
            local_hit_tokens=200,
            global_hit_tokens=600,
            queued_prefill_cost=0.5,
            prefill_speed=2.0,
            queued_fetch_s=0.3,
        ),
        ep(local_hit_tokens=600, global_hit_tokens=200, queued_fetch_s=-1.0),  # g <= c: nothing fetched
        ep(local_hit_tokens=100, global_hit_tokens=5000),  # g above L: everything from the tier
        ep(local_hit_tokens=200, global_hit_tokens=600),  # the same h as the first: one cost evaluation
    ]
    got = tier_times_s(REQ, eps, CM, FETCH)
    assert got == pytest.approx(
        [
            (0.5 + cost(400, 1000)) / 2.0 + (600 - 200) * FETCH + 0.3,
            cost(400, 1000),
            cost(0, 1000) + (1000 - 100) * FETCH,
            cost(400, 1000) + (600 - 200) * FETCH,
        ]
    )
    no_queued_fetch = tier_times_s(REQ, eps[:1], CM, FETCH, queued_fetch=False)
    assert no_queued_fetch == pytest.approx([(0.5 + cost(400, 1000)) / 2.0 + 400 * FETCH])
    no_link = tier_times_s(REQ, eps[:1], CM, None)
    assert no_link == pytest.approx([(0.5 + cost(400, 1000)) / 2.0 + 0.3])


def test_tier_time_tokens() -> None:
    e = ep(
        local_hit_tokens=200,
        global_hit_tokens=600,
        queued_prefill_tokens=300,
        prefill_speed=2.0,
        queued_fetch_s=0.3,
    )
    unit = 2e-3 / 2.0
    assert tier_time_tokens_s(REQ, e, 2e-3, FETCH) == pytest.approx(
        300 * unit + 400 * unit + 400 * FETCH + 0.3
    )
    assert tier_time_tokens_s(REQ, e, 2e-3, FETCH, queued_fetch=False) == pytest.approx(
        300 * unit + 400 * unit + 400 * FETCH
    )
    assert tier_time_tokens_s(REQ, e, 2e-3, None) == pytest.approx(300 * unit + 400 * unit + 0.3)
    held = ep(local_hit_tokens=600, global_hit_tokens=200, queued_fetch_s=-2.0)
    assert tier_time_tokens_s(REQ, held, 1e-3, FETCH) == pytest.approx(0.4)


def test_ttft_with_global_tier() -> None:
    e = ep(local_hit_tokens=300, queued_prefill_cost=0.5, prefill_speed=2.0, queued_prefill_tokens=100)
    # h = max(c, est_hit) = 700: compute 300 tokens, fetch the 400 the endpoint does not hold
    assert ttft_with_global_tier_s(REQ, e, CM, FETCH) == pytest.approx(
        (0.5 + cost(300, 1000)) / 2.0 + 400 * FETCH
    )
    assert ttft_tokens_with_global_tier_s(REQ, e, 2e-3, FETCH) == pytest.approx(
        (100 + 1000 - 700) * 2e-3 / 2.0 + 400 * FETCH
    )
    neg = ep(local_hit_tokens=300, queued_prefill_cost=-1.0, queued_prefill_tokens=-1.0)
    assert ttft_with_global_tier_s(REQ, neg, CM, FETCH) == pytest.approx(cost(300, 1000) + 400 * FETCH)
    assert ttft_tokens_with_global_tier_s(REQ, neg, 1e-3, FETCH) == pytest.approx(0.3 + 400 * FETCH)


def test_batch_counts_running_and_waiting() -> None:
    assert batch(ep(running=3, waiting=4)) == 7
    assert batch(ep(waiting=4)) == 4
    assert batch(ep(running=-2, waiting=-3)) == 0
    assert batch(ep(running=2, waiting=-3)) == 2


def test_decode_step_and_load() -> None:
    m = DecodeStepModel(base_s=0.01, per_kv_token_s=1e-6)
    e = ep(kv_usage=0.5, kv_capacity_tokens=10_000)
    assert decode_load_tokens(e) == 5000
    assert decode_step_s(e, m) == pytest.approx(0.015)
    assert decode_load_tokens(ep(kv_usage=-0.5, kv_capacity_tokens=10_000)) == 0
    assert decode_load_tokens(ep(kv_usage=0.5, kv_capacity_tokens=-10)) == 0


STEP = DecodeStepModel(base_s=0.01, per_kv_token_s=0.0)


def test_tpot_guard_boundaries() -> None:
    busy = ep(running=1)
    # d / (1 - p/h) = 0.01 / (1 - 1/2) = 0.02: exactly the SLO passes
    assert tpot_guard_ok(busy, 1.0, 2.0, 0.02, STEP)
    assert not tpot_guard_ok(busy, 1.0, 2.0, 0.0199, STEP)
    assert tpot_guard_ok(busy, 0.0, 1.0, 0.01, STEP)
    assert not tpot_guard_ok(busy, 1.0, 1.0, 1e9, STEP)  # the prefill fills the whole horizon
    assert not tpot_guard_ok(busy, 0.0, 0.0, 1e9, STEP)
    assert not tpot_guard_ok(busy, -1.0, 0.0, 1e9, STEP)  # no horizon at all: refused, not divided by
    assert not tpot_guard_ok(busy, -1.0, -0.5, 1e9, STEP)
    assert tpot_guard_ok(ep(running=0), 5.0, 1.0, 0.0, STEP)  # no decode to hurt
    assert tpot_guard_ok(ep(running=-1, waiting=9), 5.0, 1.0, 0.0, STEP)

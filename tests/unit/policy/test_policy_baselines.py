"""Baselines: Bailian, load-balance, llm-d (session), llm-d (SLO), Preble, Dynamo, round-robin, random."""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.bailian import Bailian, BailianParams
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.dynamo import Dynamo
from smetric.policy.llmd_session import LlmdSession, LlmdSessionParams
from smetric.policy.llmd_slo import LlmdSlo
from smetric.policy.load_balance import LoadBalance
from smetric.policy.preble import Preble
from smetric.policy.random_pick import RandomPick
from smetric.policy.round_robin import RoundRobin

P = PolicyParams(
    slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CostModel(c_lin_s=0.001, c_att_s=0.0),
    decode_step=DecodeStepModel(base_s=0.005, per_kv_token_s=1e-7),
)


def ep(
    name: str, hit: int = 0, q: float = 0.0, running: int = 0, waiting: int = 0, kv: float = 0.0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        local_hit_tokens=hit,
        queued_prefill_tokens=q,
        queued_prefill_cost=q / 1000,
        running=running,
        waiting=waiting,
        kv_usage=kv,
        kv_capacity_tokens=100_000,
    )


def req(prompt: int = 1000, session: str | None = None) -> RequestView:
    return RequestView("r", prompt_tokens=prompt, turn=1, session_id=session)


# --- Bailian -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lam", "endpoints", "target"),
    [
        # f = (1-λ) b/max_b + λ (1 - c/L)
        (0.7, [ep("a", running=10), ep("b", hit=800, running=10)], 1),
        (0.7, [ep("a", running=2), ep("b", hit=800, running=10)], 1),  # .3*.2+.7 = .76 vs .3+.14 = .44
        (0.2, [ep("a", running=2), ep("b", hit=800, running=10)], 0),  # .8*.2+.2 = .36 vs .8+.04 = .84
        (1.0, [ep("a"), ep("b", hit=10, running=99)], 1),  # λ = 1: pure cache affinity
    ],
)
def test_bailian(lam: float, endpoints: list[EndpointSnapshot], target: int) -> None:
    assert Bailian(P.with_own(BailianParams(bailian_lambda=lam))).pick(req(), endpoints).target == target


def test_bailian_idle_pool_ties_rotate() -> None:
    policy = Bailian(P)
    assert [policy.pick(req(), [ep("a"), ep("b")]).target for _ in range(4)] == [0, 1, 0, 1]


# --- load-balance --------------------------------------------------------------------------


def test_load_balance_weights_waiting_four_times() -> None:
    eps = [ep("a", running=5, waiting=1), ep("b", running=8, waiting=0), ep("c", running=0, waiting=3)]
    d = LoadBalance(P).pick(req(), eps)  # 9, 8, 12
    assert d.target == 1
    assert d.scores == (9.0, 8.0, 12.0)


# --- llm-d (session) -----------------------------------------------------------------------


def test_llmd_session_new_session_least_active_then_affinity() -> None:
    policy = LlmdSession(P)
    eps = [ep("a", running=4), ep("b", running=1), ep("c", running=3)]
    first = policy.pick(req(session="s1"), eps)
    assert (first.target, first.reason) == (1, "balance")
    policy.on_dispatch(req(session="s1"), "b")
    busier = [ep("a", running=1), ep("b", running=4), ep("c", running=3)]
    again = policy.pick(req(session="s1"), busier)
    assert (again.target, again.reason) == (1, "stick")  # 1 + 0 beats 0 + 0.75


def test_llmd_session_owner_gone_or_no_id_balances() -> None:
    policy = LlmdSession(P)
    policy.on_dispatch(req(session="s1"), "gone")
    d = policy.pick(req(session="s1"), [ep("a", running=2), ep("b", running=1)])
    assert (d.target, d.reason) == (1, "balance")
    policy.on_dispatch(req(session=None), "a")
    assert len(policy) == 1


def test_llmd_session_table_is_bounded_lru() -> None:
    policy = LlmdSession(P.with_own(LlmdSessionParams(session_table_size=2)))
    for sid, target in [("s1", "a"), ("s2", "b"), ("s1", "a"), ("s3", "b")]:
        policy.on_dispatch(req(session=sid), target)
    assert len(policy) == 2
    eps = [ep("a"), ep("b")]
    assert policy.pick(req(session="s1"), eps).reason == "stick"  # refreshed, kept
    assert policy.pick(req(session="s2"), eps).reason == "balance"  # least recent, evicted
    with pytest.raises(ValueError, match="session_table_size"):
        LlmdSession(P.with_own(LlmdSessionParams(session_table_size=0)))


# --- llm-d (SLO) ---------------------------------------------------------------------------


def test_llmd_slo_packs_onto_least_headroom_within_slo() -> None:
    # predicted TTFT = q/1000 + (L - c)/1000 with L = 500: 0.5, 0.9, 1.5
    eps = [ep("a"), ep("b", q=400), ep("c", q=1000)]
    d = LlmdSlo(P).pick(req(500), eps)
    assert d.target == 1
    assert d.scores[2] == float("inf")


def test_llmd_slo_tpot_prediction_excludes_kv_heavy() -> None:
    # b: TTFT ok (0.9) but TPOT 5 ms + 1e-7 * (160k + 500) > 20 ms
    eps = [ep("a"), ep("b", q=400, kv=1.6)]
    assert LlmdSlo(P).pick(req(500), eps).target == 0


def test_llmd_slo_fallback_least_loaded() -> None:
    eps = [ep("a", q=5000, running=3), ep("b", q=5000, running=1)]
    d = LlmdSlo(P).pick(req(500), eps)
    assert d.target == 1
    assert d.scores == (3.0, 1.0)


# --- Preble ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoints", "target", "reason"),
    [
        # > 50 % cached somewhere: least loaded holder
        ([ep("a"), ep("b", hit=600, running=3), ep("c", hit=900, running=2)], 2, "stick"),
        # equal load among holders: longer hit wins
        ([ep("b", hit=600, running=2), ep("c", hit=900, running=2)], 1, "stick"),
        # exactly 50 % is not enough: least work (q + L - c)
        ([ep("a", q=100), ep("b", hit=500, q=700)], 0, "balance"),
        # guard: running counts differ by > 8 -> fewest running, cache ignored
        ([ep("a", running=1), ep("b", hit=900, running=10)], 0, "balance"),
        # difference of exactly 8 does not trigger the guard
        ([ep("a", running=1), ep("b", hit=900, running=9)], 1, "stick"),
    ],
)
def test_preble(endpoints: list[EndpointSnapshot], target: int, reason: str) -> None:
    d = Preble(P).pick(req(1000), endpoints)
    assert (d.target, d.reason) == (target, reason)


# --- Dynamo ---------------------------------------------------------------------------------


def test_dynamo_blocks() -> None:
    # B = 16, L = 160 (10 blocks). a: 31-token hit = 1 whole block -> 9 new, q 32 -> 2, kv 0.
    # b: 0 hit -> 10 new, decode 0.0001 * 100k = 10 tokens -> 0.625 blocks.
    eps = [ep("a", hit=31, q=32), ep("b", kv=0.0001)]
    d = Dynamo(P).pick(req(160), eps)
    assert d.scores == pytest.approx((11.0, 10.625))
    assert d.target == 1


def test_dynamo_overlap_credit() -> None:
    eps = [ep("a", running=3), ep("b", hit=128)]
    assert Dynamo(replace(P, block_tokens=64)).pick(req(256), eps).target == 1


# --- round-robin / random -------------------------------------------------------------------


def test_round_robin_cycles() -> None:
    policy = RoundRobin(P)
    eps = [ep("a"), ep("b"), ep("c")]
    assert [policy.pick(req(), eps).target for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_deterministic_per_seed() -> None:
    eps = [ep(str(i)) for i in range(8)]
    a, b, c = RandomPick(replace(P, seed=7)), RandomPick(replace(P, seed=7)), RandomPick(replace(P, seed=8))
    run_a = [a.pick(req(), eps).target for _ in range(50)]
    assert run_a == [b.pick(req(), eps).target for _ in range(50)]
    assert run_a != [c.pick(req(), eps).target for _ in range(50)]
    assert set(run_a) == set(range(8))
